#!/usr/bin/python3
"""Prefill tokens/s: sqrtdk against ONNX Runtime's CPU provider, on the same model, in one run.

    perf/ort_peer.py [--model M.sqdk] [--threads 1,2] [--prefill 32,128,512] [--rounds 5] [--reps 3] [--json]

The model (default: the issue-19 134M-shape Llama, f32, made with `sqrtdk make-toy` if absent) is exported to ONNX
three times by tools/export_onnx.py: with opset 23's fused RMSNormalization / RotaryEmbedding / Attention, with ONNX
Runtime's own contrib operators (SkipSimplifiedLayerNormalization, GroupQueryAttention), and with opset 17
primitives (the torch.onnx form, which ONNX Runtime's optimizer fuses). ONNX Runtime runs all three and each row
takes the fastest: the peer gets its best graph. Before any timing, every graph's last-position logits are checked
against `sqrtdk run --logits` on one prompt; a peer that computes something else is refused.

Rounds interleave the engines: each round runs `sqrtdk bench` (its median of --reps prefills per length, after a
warm-up) and then ONNX Runtime (3 untimed runs, then --reps timed, per length), at each thread count. A row's figure
is the median over rounds of each round's median; the ratio is sqrtdk ÷ ONNX Runtime tokens/s, also given per round
(min–max) so the noise is visible.

Needs: a release build (./tools/run.sh), node, python3-onnx (Debian), and onnxruntime-node from the npm registry;
what is missing is installed (apt-get for python3-onnx and nodejs, `npm install` of onnxruntime-node into --ort-dir,
default ~/.cache/sqrtdk/ort-peer; its postinstall, which fetches CUDA binaries from NuGet, is skipped).
Exit codes: 0 ok, 1 usage or set-up error, 2 the peer's logits disagree.
"""
import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
ORT_VERSION = "1.31.1"  # the version the figures in README were measured with; --ort-version to change
GRAPHS = ("onnx23", "contrib", "basic")
# Logits may differ by summation order only (f32, K up to d_ff, over every layer): measured 4.5e-6 of a largest
# logit of 2.3 on the 134M toy. 1e-3 of the largest logit still catches a wrong RoPE layout or a missing norm.
LOGITS_RTOL = 1e-3


def fail(msg, code=1):
    print(f"ort_peer.py: {msg}", file=sys.stderr)
    sys.exit(code)


def log(msg):
    print(f"ort_peer: {msg}", file=sys.stderr, flush=True)


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        fail(f"{' '.join(map(str, cmd))} failed (exit {r.returncode}):\n{r.stderr.strip()}")
    return r.stdout


def apt_install(package):
    if os.geteuid() != 0:
        fail(f"{package} is missing: apt-get install {package} (as root)")
    log(f"installing {package} (apt-get)")
    run(["apt-get", "install", "-y", "--no-install-recommends", package], env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def ensure_setup(ort_dir, version):
    try:
        import onnx  # noqa: F401
    except ImportError:
        apt_install("python3-onnx")
    if shutil.which("node") is None or shutil.which("npm") is None:
        apt_install("nodejs")
        apt_install("npm")
    pkg = os.path.join(ort_dir, "node_modules", "onnxruntime-node")
    installed = None
    if os.path.exists(os.path.join(pkg, "package.json")):
        installed = json.load(open(os.path.join(pkg, "package.json")))["version"]
    if installed != version:
        log(f"installing onnxruntime-node@{version} into {ort_dir} (npm registry, ~115 MB)")
        os.makedirs(ort_dir, exist_ok=True)
        run(["npm", "install", "--prefix", ort_dir, "--no-audit", "--no-fund", f"onnxruntime-node@{version}"],
            env={**os.environ, "ONNXRUNTIME_NODE_INSTALL": "skip"})
    return pkg


def export_graphs(model, cache_dir):
    import export_onnx

    # Named by the model's content and the exporter's, so the same model made again (cpu_column.sh makes one per run)
    # reuses the export, and a changed exporter writes it anew.
    digest = hashlib.sha256(open(export_onnx.__file__, "rb").read())
    with open(model, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            digest.update(block)
    stem = f"{os.path.splitext(os.path.basename(model))[0]}.{digest.hexdigest()[:16]}"
    paths = {}
    for ops in GRAPHS:
        path = os.path.join(cache_dir, f"{stem}.{ops}.onnx")
        if not os.path.exists(path):
            log(f"exporting {model} to {path}")
            export_onnx.export(model, path, ops)
        paths[ops] = path
    return paths


def node_peer(ort_pkg, onnx_path, threads, args_extra):
    out = run(["node", os.path.join(ROOT, "perf", "ort_peer.js"), "--ort", ort_pkg, "--model", onnx_path,
               "--threads", str(threads)] + args_extra)
    return json.loads(out)


def check_logits(sqrtdk, model, ort_pkg, graphs, vocab):
    import numpy as np

    ids = [(i * 7919 + 5) % vocab for i in range(16)]
    with tempfile.TemporaryDirectory() as tmp:
        npy = os.path.join(tmp, "logits.npy")
        run([sqrtdk, "run", "-m", model, "--tokens", ",".join(map(str, ids)), "--logits", npy, "-t", "1"])
        ours = np.load(npy)[-1]
    worst = {}
    for ops, path in graphs.items():
        theirs = np.array(node_peer(ort_pkg, path, 1, ["--logits", ",".join(map(str, ids))])["logits"], np.float32)
        diff = float(np.abs(theirs - ours).max()) if theirs.shape == ours.shape else float("inf")
        bound = LOGITS_RTOL * float(np.abs(ours).max())
        if not diff <= bound:
            fail(f"{path}: ONNX Runtime's logits differ from sqrtdk's by {diff:.3g} (bound {bound:.3g}): "
                 "not the same model, refusing to compare", 2)
        worst[ops] = diff
    return worst


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="a Llama .sqdk (default: the 134M-shape toy, made in --ort-dir if absent)")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--prefill", default="32,128,512")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument("--reps", type=int, default=3, help="timed prefills per length per round (default 3)")
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "release", "bin"), help="sqrtdk's bin folder")
    p.add_argument("--ort-dir", default=os.path.expanduser("~/.cache/sqrtdk/ort-peer"),
                   help="where onnxruntime-node is installed and the exported graphs are kept")
    p.add_argument("--ort-version", default=ORT_VERSION)
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    a = p.parse_args(argv)
    try:
        threads = [int(t) for t in a.threads.split(",")]
        lengths = [int(t) for t in a.prefill.split(",")]
    except ValueError:
        fail("--threads and --prefill take comma-separated integers")
    if a.rounds < 1 or a.reps < 1 or min(threads + lengths) < 1:
        fail("--rounds, --reps, --threads and --prefill must be ≥ 1")
    sqrtdk = os.path.join(a.bin, "sqrtdk")
    if not os.access(sqrtdk, os.X_OK):
        fail(f"{sqrtdk} not found: build first (./tools/run.sh)")

    ort_pkg = ensure_setup(a.ort_dir, a.ort_version)
    model = a.model
    if model is None:
        model = os.path.join(a.ort_dir, "llama134m.sqdk")
        if not os.path.exists(model):
            run([sqrtdk, "make-toy", "-o", model, "--arch", "llama", "--d-model", "768", "--n-layers", "12",
                 "--n-heads", "12", "--d-ff", "2048", "--n-vocab", "32000", "--max-seq", "1024", "--tied",
                 "--seed", "1"])
    from sqdk import read_sqdk

    try:
        cfg, _ = read_sqdk(model, verify=False)  # the config (the export reads the tensors again)
    except (OSError, ValueError, KeyError, struct.error) as e:
        fail(f"{model}: cannot read the model: {e}")
    if max(lengths) > cfg["max_seq"]:
        fail(f"{model}: --prefill {max(lengths)} is past the model's max_seq {cfg['max_seq']}")
    graphs = export_graphs(model, a.ort_dir)
    logit_diffs = check_logits(sqrtdk, model, ort_pkg, graphs, cfg["n_vocab"])
    log(f"logits agree with sqrtdk's (max abs diff {', '.join(f'{k} {v:.2g}' for k, v in logit_diffs.items())})")

    ours = {}    # (threads, T) -> [tokens/s per round]
    theirs = {}  # (ops, threads, T) -> [tokens/s per round]
    for r in range(a.rounds):
        log(f"round {r + 1} of {a.rounds}")
        for th in threads:
            bench = json.loads(run([sqrtdk, "bench", "-m", model, "-t", str(th), "--prefill", a.prefill, "--decode",
                                    "1", "--reps", str(a.reps), "--json", "-q", "--cached-roofs"]))
            for row in bench["results"][0]["prefill"]:
                ours.setdefault((th, row["tokens"]), []).append(row["tokens_per_s"])
            for ops, path in graphs.items():
                res = node_peer(ort_pkg, path, th, ["--prefill", a.prefill, "--reps", str(a.reps),
                                                    "--vocab", str(cfg["n_vocab"])])
                for row in res["prefill"]:
                    theirs.setdefault((ops, th, row["tokens"]), []).append(
                        row["tokens"] / statistics.median(row["seconds"]))

    rows = []
    for th in threads:
        for T in lengths:
            med = statistics.median
            best = max(GRAPHS, key=lambda ops: med(theirs[(ops, th, T)]))
            per_round = [o / t for o, t in zip(ours[(th, T)], theirs[(best, th, T)])]
            rows.append({"threads": th, "tokens": T, "sqrtdk_tokens_per_s": med(ours[(th, T)]),
                         "ort_tokens_per_s": med(theirs[(best, th, T)]), "ort_graph": best,
                         "ort_tokens_per_s_by_graph": {ops: med(theirs[(ops, th, T)]) for ops in GRAPHS},
                         "ratio": med(ours[(th, T)]) / med(theirs[(best, th, T)]),
                         "ratio_per_round_min": min(per_round), "ratio_per_round_max": max(per_round)})
    cpu = "unknown"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    doc = {"cpu": cpu, "logical_cores": os.cpu_count(), "kernel": platform.release(), "model": model,
           "onnxruntime_node": a.ort_version, "rounds": a.rounds, "reps": a.reps,
           "logits_max_abs_diff": logit_diffs, "rows": rows}
    if a.json:
        print(json.dumps(doc, indent=2))
        return
    print(f"prefill tokens/s, {cpu}, {os.cpu_count()} logical cores; medians of {a.rounds} interleaved rounds "
          f"(each a median of {a.reps}); ONNX Runtime {a.ort_version} (onnxruntime-node), its faster graph per row")
    print("| threads | T | sqrtdk | ONNX Runtime | graph | sqrtdk ÷ ORT | per round |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['threads']} | {r['tokens']} | {r['sqrtdk_tokens_per_s']:.0f} | {r['ort_tokens_per_s']:.0f} | "
              f"{r['ort_graph']} | {r['ratio']:.2f} | {r['ratio_per_round_min']:.2f}–{r['ratio_per_round_max']:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
