#!/usr/bin/python3
"""Prefill and decode tokens/s: sqrtdk against ONNX Runtime's CPU provider, on the same model, in one run.

    perf/ort_peer.py [--model M.sqdk] [--threads 1,2] [--prefill 32,128,512] [--decode 128] [--decode-prompt 32]
                     [--rounds 5] [--reps 3] [--json]

The model (default: the issue-19 134M-shape Llama, f32, made with `sqrtdk make-toy` if absent) is exported to ONNX
by tools/export_onnx.py three times for prefill: with opset 23's fused RMSNormalization / RotaryEmbedding /
Attention, with ONNX Runtime's own contrib operators (SkipSimplifiedLayerNormalization, GroupQueryAttention), and
with opset 17 primitives (the torch.onnx form, which ONNX Runtime's optimizer fuses). ONNX Runtime runs all three and
each prefill row takes the fastest: the peer gets its best graph. Decode runs the contrib form with the KV cache as
inputs and outputs (`--with-past`, the form ONNX Runtime's generative-AI builder emits): the prompt in one call, then
one call per token, each fed the previous call's present K/V (ONNX Runtime copies the past into the present each
step: a few MB, against the ~440 MB of weights a step reads). Before any timing, every graph's logits are checked
against `sqrtdk run --logits` on one prompt (the decode graph's after 8 one-token steps); a peer that computes
something else is refused.

Rounds interleave the engines: each round runs `sqrtdk bench` (its median of --reps prefills per length and of
--reps decodes of --decode tokens after a --decode-prompt prompt, after a warm-up) and then ONNX Runtime (prefill: 3
untimed runs, then --reps timed, per length; decode: one untimed, then --reps timed), at each thread count. A row's
figure is the median over rounds of each round's median; the ratio is sqrtdk ÷ ONNX Runtime tokens/s, also given
per round (min–max) so the noise is visible.

Needs: a release build (./tools/run.sh), node, python3-onnx (Debian), and onnxruntime-node from the npm registry;
what is missing is installed (apt-get for python3-onnx and nodejs, `npm install` of onnxruntime-node into --ort-dir,
default ~/.cache/sqrtdk/ort-peer; its postinstall, which fetches CUDA binaries from NuGet, is skipped).
Exit codes: 0 ok, 1 usage or set-up error, 2 the peer's logits disagree.
"""
import argparse
import hashlib
import importlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
ORT_VERSION = "1.31.1"  # the version the figures in README were measured with; --ort-version to change
GRAPHS = ("onnx23", "contrib", "basic")
DECODE_GRAPH = "contrib_past"  # the contrib form with the KV cache as inputs and outputs (export_onnx.py --with-past)
DECODE_CHECK_PROMPT = 8  # the logits check's decode: 8 tokens in one call, then the other 8 one at a time
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
        fail(f"{package} is missing: apt-get update && apt-get install {package} (as root)")
    log(f"installing {package} (apt-get update, apt-get install)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    run(["apt-get", "update", "-qq"], env=env)  # a fresh machine's package lists may be empty (as tools/setup.sh)
    run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", package], env=env)


def ensure_setup(ort_dir, version):
    try:
        importlib.import_module("onnx")  # tools/export_onnx.py needs it
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


def export_graphs(model, cache_dir, weights):
    """The graphs' paths, exported where missing; weights: export_onnx.read_model(model)."""
    import export_onnx

    # Named by the model's content and the exporter's, so the same model made again (cpu_column.sh makes one per run)
    # reuses the export, and a changed exporter writes it anew.
    digest = hashlib.sha256(open(export_onnx.__file__, "rb").read())
    with open(model, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            digest.update(block)
    stem = f"{os.path.splitext(os.path.basename(model))[0]}.{digest.hexdigest()[:16]}"
    paths = {}
    for name in GRAPHS + (DECODE_GRAPH,):
        path = os.path.join(cache_dir, f"{stem}.{name}.onnx")
        if not os.path.exists(path):
            log(f"exporting {model} to {path}")
            export_onnx.export(model, path, name.removesuffix("_past"), with_past=name == DECODE_GRAPH,
                               model=weights)
        paths[name] = path
    return paths


def node_peer(ort_pkg, onnx_path, threads, args_extra):
    out = run(["node", os.path.join(ROOT, "perf", "ort_peer.js"), "--ort", ort_pkg, "--model", onnx_path,
               "--threads", str(threads)] + args_extra)
    return json.loads(out)


def check_logits(sqrtdk, model, ort_pkg, graphs, cfg):
    import numpy as np

    ids = [(i * 7919 + 5) % cfg["n_vocab"] for i in range(16)]
    with tempfile.TemporaryDirectory() as tmp:
        npy = os.path.join(tmp, "logits.npy")
        run([sqrtdk, "run", "-m", model, "--tokens", ",".join(map(str, ids)), "--logits", npy, "-t", "1"])
        ours = np.load(npy)[-1]
    worst = {}
    for name, path in graphs.items():
        extra = kv_args(cfg) + ["--decode-prompt", str(DECODE_CHECK_PROMPT)] if name == DECODE_GRAPH else []
        theirs = np.array(node_peer(ort_pkg, path, 1, ["--logits", ",".join(map(str, ids))] + extra)["logits"],
                          np.float32)
        diff = float(np.abs(theirs - ours).max()) if theirs.shape == ours.shape else float("inf")
        bound = LOGITS_RTOL * float(np.abs(ours).max())
        if not diff <= bound:
            fail(f"{path}: ONNX Runtime's logits differ from sqrtdk's by {diff:.3g} (bound {bound:.3g}): "
                 "not the same model, refusing to compare", 2)
        worst[name] = diff
    return worst


def kv_args(cfg):
    return ["--kv", f"{cfg['n_kv_heads']},{cfg['head_dim']}"]


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="a Llama .sqdk (default: the 134M-shape toy, made in --ort-dir if absent)")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--prefill", default="32,128,512")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument("--reps", type=int, default=3, help="timed prefills per length, and decodes, per round (default 3)")
    p.add_argument("--decode", type=int, default=128, help="decode steps timed (default 128, as sqrtdk bench; 0: none)")
    p.add_argument("--decode-prompt", type=int, default=32, help="prompt tokens before decoding (default 32)")
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
    if a.rounds < 1 or a.reps < 1 or min(threads + lengths) < 1 or a.decode < 0 or a.decode_prompt < 1:
        fail("--rounds, --reps, --threads, --prefill and --decode-prompt must be ≥ 1, --decode ≥ 0")
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
    import export_onnx

    weights = export_onnx.read_model(model)  # once, for the config and every graph exported below
    cfg = weights[0]
    if max(lengths) > cfg["max_seq"] or a.decode_prompt + a.decode > cfg["max_seq"]:
        fail(f"{model}: --prefill {max(lengths)} or --decode-prompt + --decode {a.decode_prompt + a.decode} is past "
             f"the model's max_seq {cfg['max_seq']}")
    graphs = export_graphs(model, a.ort_dir, weights)
    logit_diffs = check_logits(sqrtdk, model, ort_pkg, graphs, cfg)
    log(f"logits agree with sqrtdk's (max abs diff {', '.join(f'{k} {v:.2g}' for k, v in logit_diffs.items())})")

    ours = {}    # (threads, T) -> [tokens/s per round]; T = "decode" for the decode steps
    theirs = {}  # (graph, threads, T) -> [tokens/s per round]
    for r in range(a.rounds):
        log(f"round {r + 1} of {a.rounds}")
        for th in threads:
            bench = json.loads(run([sqrtdk, "bench", "-m", model, "-t", str(th), "--prefill", a.prefill,
                                    "--decode", str(max(1, a.decode)), "--decode-prompt", str(a.decode_prompt),
                                    "--reps", str(a.reps), "--json", "-q", "--cached-roofs"]))
            for row in bench["results"][0]["prefill"]:
                ours.setdefault((th, row["tokens"]), []).append(row["tokens_per_s"])
            if a.decode:
                ours.setdefault((th, "decode"), []).append(bench["results"][0]["decode_tokens_per_s"])
            for name in GRAPHS:
                res = node_peer(ort_pkg, graphs[name], th, ["--prefill", a.prefill, "--reps", str(a.reps),
                                                            "--vocab", str(cfg["n_vocab"])])
                for row in res["prefill"]:
                    theirs.setdefault((name, th, row["tokens"]), []).append(
                        row["tokens"] / statistics.median(row["seconds"]))
            if a.decode:
                res = node_peer(ort_pkg, graphs[DECODE_GRAPH], th,
                                ["--decode", str(a.decode), "--decode-prompt", str(a.decode_prompt), "--reps",
                                 str(a.reps), "--vocab", str(cfg["n_vocab"])] + kv_args(cfg))
                theirs.setdefault((DECODE_GRAPH, th, "decode"), []).append(
                    statistics.median(res["decode"]["tokens_per_s"]))

    med = statistics.median
    rows = []
    for th in threads:
        for T in lengths + (["decode"] if a.decode else []):
            names = GRAPHS if T != "decode" else (DECODE_GRAPH,)
            best = max(names, key=lambda name: med(theirs[(name, th, T)]))
            per_round = [o / t for o, t in zip(ours[(th, T)], theirs[(best, th, T)])]
            row = {"threads": th, "phase": "prefill" if T != "decode" else "decode",
                   "tokens": T if T != "decode" else a.decode, "sqrtdk_tokens_per_s": med(ours[(th, T)]),
                   "ort_tokens_per_s": med(theirs[(best, th, T)]), "ort_graph": best,
                   "ort_tokens_per_s_by_graph": {name: med(theirs[(name, th, T)]) for name in names},
                   "ratio": med(ours[(th, T)]) / med(theirs[(best, th, T)]),
                   "ratio_per_round_min": min(per_round), "ratio_per_round_max": max(per_round)}
            if T == "decode":
                row["prompt"] = a.decode_prompt
            rows.append(row)
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
    print(f"tokens/s, {cpu}, {os.cpu_count()} logical cores; medians of {a.rounds} interleaved rounds (each a median "
          f"of {a.reps}); ONNX Runtime {a.ort_version} (onnxruntime-node), its fastest graph per row")
    print("| threads | phase | sqrtdk | ONNX Runtime | graph | sqrtdk ÷ ORT | per round |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        phase = (f"prefill {r['tokens']}" if r["phase"] == "prefill"
                 else f"decode {r['tokens']} after {r['prompt']}")
        print(f"| {r['threads']} | {phase} | {r['sqrtdk_tokens_per_s']:.0f} | {r['ort_tokens_per_s']:.0f} | "
              f"{r['ort_graph']} | {r['ratio']:.2f} | {r['ratio_per_round_min']:.2f}–{r['ratio_per_round_max']:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
