#!/usr/bin/python3
"""Train with and without 1/sqrt(d_k): does saturated softmax starve the queries and keys of gradient?

Trains tools/train_tiny.py's model (the bundled model's architecture: a byte-level Llama, sqrtdk's `llama` family)
on the same KJV text, once per (head width d_k, attention scale) pair: scale 1/sqrt(d_k) (standard) and 1
(unscaled), optionally 1/d_k (--scales rsqrt,one,inv), at d_k = 32 and 128 with d_model fixed (8 and 2 query heads). Every run starts from the same weights
(one seed; n_heads * d_k is the same for every d_k, so even the initial weights are identical), sees the same
batches in the same order and takes the same number of steps with the same learning-rate schedule.

Every --every steps (and at the last step) it records, before that step's update:
  train_bpb          mean training loss (bits per byte) over the steps since the previous record (at step 0: the
                     first batch's loss under the initial weights)
  val_bpb            bits per byte on --val-windows windows spread over the validation split
  grad_norm          L2 norm of the gradient of the probe batch's loss (below) reaching each weight group: attn_q,
                     attn_k, attn_v (the control inside attention), attn_out, ffn (gate, up and down together),
                     over all layers, and per layer in grad_norm_per_layer. Measured before clipping.
  entropy_bits       mean attention entropy (bits) per layer over heads and query rows of the probe batch
  saturated_frac     per layer, the fraction of attention rows whose largest probability exceeds 0.99 (row 0 is
                     left out: it sees only BOS, so its one probability is always 1)
The probe batch is --probe-windows fixed validation windows, the same for every run and every record.

Output (in --out): scaling_training.json (everything above, the settings and the wall time), scaling_training.svg
(validation bits per byte, Q and K gradient norm and attention entropy against step, one column per d_k),
models/<run>.sqdk (each trained model, for `sqrtdk attention-map` and `sqrtdk generate`) with <run>.check.json
(PyTorch's logits for a fixed prompt, for the engine test), run logs on stdout.
--figure and --results also copy the figure and the JSON elsewhere (the README's committed copies).

Determinism: each run uses one torch thread (--jobs runs that many runs side by side, each in its own process),
so the numbers do not depend on --jobs or on the machine's load; only the recorded wall times do.

Usage (the committed results; see README.md "Why √d_k? Watch it train"):
  /usr/bin/python3 tools/scaling_training.py --steps 600 --jobs 2 --out /work/scaling-out \\
      --figure docs/images/scaling_training.svg --results docs/scaling_training.json
A smoke run on any text file (what tests/tools/test_scaling_training.cpp runs):
  /usr/bin/python3 tools/scaling_training.py --tiny --steps 4 --every 2 --corpus README.md --out /tmp/s
"""

import argparse
import json
import math
import multiprocessing
import os
import shutil
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train_tiny as tt  # noqa: E402  (the model, data and export code of the bundled model)
import sqdk  # noqa: E402  (the reference .sqdk writer)

SCALES = {  # name -> attention scale as a function of d_k
    "rsqrt": lambda d: 1.0 / math.sqrt(d),
    "one": lambda d: 1.0,
    "inv": lambda d: 1.0 / d,
}
SCALE_LABELS = {"rsqrt": "1/√d_k", "one": "1 (unscaled)", "inv": "1/d_k"}
CHECK_PROMPT = "In the beginning God"
WEIGHT_GROUPS = {"attn_q": ["attn_q"], "attn_k": ["attn_k"], "attn_v": ["attn_v"], "attn_out": ["attn_out"],
                 "ffn": ["ffn_gate", "ffn_up", "ffn_down"]}


def run_name(head_dim, scale):
    return "dk%d-%s" % (head_dim, scale)


def model_config(args, head_dim, scale):
    n_heads = args.d_model // head_dim
    return tt.Config(d_model=args.d_model, n_layers=args.n_layers, n_heads=n_heads,
                     n_kv_heads=max(1, n_heads // 2), head_dim=head_dim, d_ff=args.d_ff, max_seq=args.seq,
                     attention_scale=SCALES[scale](head_dim))


def load_text(args):
    if args.corpus:
        with open(args.corpus, "rb") as f:
            return f.read()
    return tt.load_corpus(args.out)  # KJV from Debian's bible-kjv, cached as <out>/kjv.txt


def rnd(x, digits=6):
    """Rounded for the JSON (identical runs give identical files; 6 significant digits are plenty)."""
    return float("%.*g" % (digits, x))


def grad_norms(model):
    """{group: norm over all layers}, {group: [norm per layer]} of the gradients now in model's weights."""
    per_layer = {g: [] for g in WEIGHT_GROUPS}
    for b in model.blocks:
        for g, names in WEIGHT_GROUPS.items():
            sq = sum(float(getattr(b, n).weight.grad.double().pow(2).sum()) for n in names)
            per_layer[g].append(math.sqrt(sq))
    total = {g: math.sqrt(sum(v * v for v in vs)) for g, vs in per_layer.items()}
    return total, per_layer


def probe(model, x, y):
    """One forward and backward pass on the probe batch: gradient norms and attention statistics per layer."""
    for b in model.blocks:
        b.keep_probs = True
    model.zero_grad(set_to_none=True)
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, tt.N_VOCAB), y.reshape(-1))
    loss.backward()
    total, per_layer = grad_norms(model)
    model.zero_grad(set_to_none=True)
    entropy, saturated = [], []
    for b in model.blocks:
        p = b.probs[:, :, 1:, :].double()  # [B, H, T-1, T]: rows 1.. (row 0 sees only BOS)
        ent = -(p * torch.log2(torch.where(p > 0, p, torch.ones_like(p)))).sum(-1)
        entropy.append(float(ent.mean()))
        saturated.append(float((p.max(-1).values > 0.99).double().mean()))
        b.keep_probs = False
        b.probs = None
    return total, per_layer, entropy, saturated


def train_run(job):
    """One training run; returns its record. Runs in its own process when --jobs > 1."""
    args, head_dim, scale = job
    torch.set_num_threads(1)
    name = run_name(head_dim, scale)
    t_start = time.time()
    text = load_text(args)
    train_data, val_data = tt.split_data(text, args.val_frac)
    starts = tt.line_starts(train_data)
    xs, ys = tt.eval_windows(val_data, args.seq)
    full = [i for i in range(len(xs)) if len(xs[i]) == args.seq]
    pick = [full[i] for i in np.linspace(0, len(full) - 1, min(args.probe_windows, len(full))).astype(int)]
    probe_x = torch.from_numpy(np.stack([xs[i] for i in pick]))
    probe_y = torch.from_numpy(np.stack([ys[i] for i in pick]))

    torch.manual_seed(args.seed)
    c = model_config(args, head_dim, scale)
    model = tt.TinyLlama(c)
    opt = tt.make_optimizer(model, args)
    gen = torch.Generator().manual_seed(args.seed)  # the same batches in the same order for every run
    records, losses = [], []
    for step in range(args.steps + 1):
        if step < args.steps:
            x, y = tt.make_batch(train_data, starts, args.batch, args.seq, gen)
        if step % args.every == 0 or step == args.steps:
            if losses:
                train_bpb = sum(losses) / len(losses) / math.log(2)
            else:
                with torch.no_grad():
                    train_bpb = F.cross_entropy(model(x).reshape(-1, tt.N_VOCAB), y.reshape(-1)).item() / math.log(2)
            losses = []
            total, per_layer, entropy, saturated = probe(model, probe_x, probe_y)
            val_bpb = tt.evaluate_bpb(model, val_data, args.seq, max_windows=args.val_windows)
            records.append({"step": step, "train_bpb": rnd(train_bpb), "val_bpb": rnd(val_bpb),
                            "grad_norm": {g: rnd(v) for g, v in total.items()},
                            "grad_norm_per_layer": {g: [rnd(v) for v in vs] for g, vs in per_layer.items()},
                            "entropy_bits": [rnd(v) for v in entropy],
                            "saturated_frac": [rnd(v) for v in saturated]})
            r = records[-1]
            print("%-10s step %5d  train %.4f  val %.4f bpb  |grad| q %.2e k %.2e v %.2e ffn %.2e  entropy %s  "
                  "sat %s  %.0f s" % (name, step, train_bpb, val_bpb, total["attn_q"], total["attn_k"],
                                      total["attn_v"], total["ffn"], " ".join("%.2f" % e for e in entropy),
                                      " ".join("%.2f" % s for s in saturated), time.time() - t_start), flush=True)
        if step == args.steps:
            break
        lr = lr_at(step, args)
        for g in opt.param_groups:
            g["lr"] = lr
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, tt.N_VOCAB), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        losses.append(loss.item())

    os.makedirs(os.path.join(args.out, "models"), exist_ok=True)
    sqdk_path = os.path.join(args.out, "models", name + ".sqdk")
    tt.write_sqdk(sqdk, c, tt.sqdk_tensors(model), sqdk_path)  # reads the file back and compares
    # PyTorch's logits for a fixed prompt, so a test can check the engine runs this model (and its scale) the same.
    ids = tt.encode_prompt(CHECK_PROMPT)[:args.seq]
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor([ids]))[0].numpy()
    with open(os.path.join(args.out, "models", name + ".check.json"), "w") as f:
        json.dump({"prompt_ids": ids, "logits": [[float(v) for v in row] for row in logits]}, f)
    return {"name": name, "head_dim": head_dim, "n_heads": c.n_heads, "n_kv_heads": c.n_kv_heads, "scale": scale,
            "attention_scale": c.attention_scale, "model": sqdk_path, "records": records,
            "wall_seconds": round(time.time() - t_start, 1)}


def lr_at(step, args):
    """Linear warmup, then cosine decay to min_lr_frac of the peak, over exactly --steps steps (no time budget:
    every run gets the same schedule whatever the machine's load)."""
    warmup = min(args.warmup, max(1, args.steps // 10))
    if step < warmup:
        return args.lr * (step + 1) / warmup
    p = (step - warmup) / max(1, args.steps - warmup)
    return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * p)))


# ----------------------------------------------------------------------------------------------------------------
# Figure: a hand-written SVG (no plotting library needed, and the same bytes for the same numbers).

COLORS = {"rsqrt": "#1f77b4", "one": "#d62728", "inv": "#2ca02c"}


def _ticks(lo, hi, log):
    if log:
        return [10.0 ** e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]
    span = hi - lo
    step = 10 ** math.floor(math.log10(span / 4)) if span > 0 else 1.0
    for m in (1, 2, 5, 10):
        if span / (step * m) <= 6:
            step *= m
            break
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def svg_figure(result):
    runs = result["runs"]
    head_dims = sorted({r["head_dim"] for r in runs})
    # (title, value of a record, log scale, fixed y range or None)
    panels = [("validation bits per byte", lambda rec: rec["val_bpb"], False, None),
              ("‖∇W_q‖ + ‖∇W_k‖ (log)", lambda rec: rec["grad_norm"]["attn_q"] + rec["grad_norm"]["attn_k"], True,
               None),
              ("attention entropy, bits (mean of layers)",
               lambda rec: sum(rec["entropy_bits"]) / len(rec["entropy_bits"]), False, None),
              ("rows with max p > 0.99 (mean of layers)",
               lambda rec: sum(rec["saturated_frac"]) / len(rec["saturated_frac"]), False, (0.0, 1.0))]
    pw, ph, ml, mt, gap_x, gap_y = 300, 150, 70, 48, 48, 52
    width = ml + len(head_dims) * (pw + gap_x) + 10
    height = mt + len(panels) * (ph + gap_y) + 30
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
           'font-family="sans-serif" font-size="11">' % (width, height, width, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="18" font-size="13" font-weight="bold">Training with and without 1/√d_k: %s</text>'
           % (ml, result["settings_summary"])]
    x = ml
    for scale in result["scales"]:  # legend
        out.append('<line x1="%d" y1="32" x2="%d" y2="32" stroke="%s" stroke-width="2"/>' % (x, x + 18, COLORS[scale]))
        out.append('<text x="%d" y="36">scale %s</text>' % (x + 22, SCALE_LABELS[scale]))
        x += 130
    max_step = max(rec["step"] for r in runs for rec in r["records"])
    for row, (title, value, log, fixed) in enumerate(panels):
        vals = [value(rec) for r in runs for rec in r["records"]]
        vals = [v for v in vals if math.isfinite(v) and (v > 0 or not log)]
        lo, hi = fixed if fixed else (min(vals), max(vals))
        if log:
            lo, hi = 10 ** math.floor(math.log10(lo)), 10 ** math.ceil(math.log10(hi))
        elif hi == lo:
            lo, hi = lo - 1, hi + 1
        fy = (lambda v: math.log10(v)) if log else (lambda v: v)
        for col, d in enumerate(head_dims):
            x0, y0 = ml + col * (pw + gap_x), mt + row * (ph + gap_y) + 14
            sx = lambda s: x0 + pw * s / max(1, max_step)
            sy = lambda v: y0 + ph - ph * (fy(v) - fy(lo)) / (fy(hi) - fy(lo))
            out.append('<text x="%d" y="%d" font-weight="bold">d_k = %d: %s</text>' % (x0, y0 - 6, d, title))
            out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>' % (x0, y0, pw, ph))
            for t in _ticks(lo, hi, log):
                if lo - 1e-12 <= t <= hi + 1e-12:
                    y = sy(t)
                    out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>' % (x0, y, x0 + pw, y))
                    out.append('<text x="%d" y="%.1f" text-anchor="end">%s</text>' % (x0 - 4, y + 4, "%g" % t))
            for t in _ticks(0, max_step, False):
                out.append('<text x="%.1f" y="%d" text-anchor="middle">%g</text>' % (sx(t), y0 + ph + 13, t))
            out.append('<text x="%d" y="%d" text-anchor="middle">step</text>' % (x0 + pw // 2, y0 + ph + 26))
            for r in runs:
                if r["head_dim"] != d:
                    continue
                pts = [(rec["step"], value(rec)) for rec in r["records"]]
                pts = [(s, v) for s, v in pts if math.isfinite(v) and (v > 0 or not log)]
                path = " ".join("%.1f,%.1f" % (sx(s), sy(v)) for s, v in pts)
                out.append('<polyline fill="none" stroke="%s" stroke-width="1.6" points="%s"/>'
                           % (COLORS[r["scale"]], path))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def markdown_table(result):
    """The README's table: final bits per byte, Q/K and V gradient norms, attention entropy and saturation."""
    lines = ["| d_k | scale | train bpb | val bpb | ‖∇W_q‖+‖∇W_k‖ step 0 | step 100 | end | ‖∇W_v‖ end | "
             "entropy, bits (per layer, end) | rows max p > 0.99 (end) |", "|" + "---|" * 10]
    for r in result["runs"]:
        recs = {rec["step"]: rec for rec in r["records"]}
        last = r["records"][-1]
        qk = lambda rec: "%.3g" % (rec["grad_norm"]["attn_q"] + rec["grad_norm"]["attn_k"]) if rec else "—"
        lines.append("| %d | %s | %.3f | %.3f | %s | %s | %s | %.3g | %s | %s |" % (
            r["head_dim"], SCALE_LABELS[r["scale"]], last["train_bpb"], last["val_bpb"], qk(recs.get(0)),
            qk(recs.get(100)), qk(last), last["grad_norm"]["attn_v"],
            " / ".join("%.2f" % e for e in last["entropy_bits"]), " / ".join("%.2f" % s for s in last["saturated_frac"])))
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, help="optimizer steps per run (the same for every run)")
    ap.add_argument("--out", help="results, figure, exported models, cached corpus")
    ap.add_argument("--replot", metavar="JSON",
                    help="only redraw the figure (--figure) from a results file and print its table")
    ap.add_argument("--every", type=int, default=25, help="record every this many steps (and at the end)")
    ap.add_argument("--head-dims", default="32,128", help="d_k values (each divides --d-model)")
    ap.add_argument("--scales", default="rsqrt,one", help="some of rsqrt (1/sqrt(d_k)), one (1), inv (1/d_k)")
    ap.add_argument("--jobs", type=int, default=1, help="runs side by side, one torch thread each")
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--n-layers", type=int, default=2)
    ap.add_argument("--d-ff", type=int, default=384)
    ap.add_argument("--seq", type=int, default=128, help="window: BOS then seq-1 bytes")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--val-frac", type=float, default=0.05)
    ap.add_argument("--val-windows", type=int, default=32, help="validation windows per record")
    ap.add_argument("--probe-windows", type=int, default=8, help="validation windows in the probe batch")
    ap.add_argument("--corpus", help="train on this text file instead of the KJV (smoke tests)")
    ap.add_argument("--tiny", action="store_true", help="a tiny model (d_model 32, 1 layer, d_k 8 and 16)")
    ap.add_argument("--figure", help="also copy the SVG figure here")
    ap.add_argument("--results", help="also copy the JSON results here")
    args = ap.parse_args()
    if args.replot:
        if not args.figure:
            ap.error("--replot needs --figure")
        with open(args.replot) as f:
            svg = svg_figure(json.load(f))
        with open(args.figure, "w") as f:
            f.write(svg)
        with open(args.replot) as f:
            print(markdown_table(json.load(f)))
        return
    if args.steps is None or args.out is None:
        ap.error("--steps and --out are required (unless --replot)")
    if args.tiny:
        args.d_model, args.n_layers, args.d_ff, args.seq, args.batch = 32, 1, 32, 32, 4
        args.val_windows, args.probe_windows = 4, 2
        if args.head_dims == ap.get_default("head_dims"):
            args.head_dims = "8,16"
    head_dims = [int(v) for v in args.head_dims.split(",")]
    scales = args.scales.split(",")
    for s in scales:
        if s not in SCALES:
            ap.error("--scales: unknown scale %r (expected some of %s)" % (s, ", ".join(SCALES)))
    for d in head_dims:
        if d <= 0 or d % 2 or args.d_model % d:
            ap.error("--head-dims: %d is not an even divisor of --d-model %d" % (d, args.d_model))
    if args.steps < 1 or args.every < 1:
        ap.error("--steps and --every must be >= 1")
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    load_text(args)  # caches the corpus once, before the workers start

    jobs = [(args, d, s) for d in head_dims for s in scales]
    t0 = time.time()
    if args.jobs > 1:
        with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
            runs = pool.map(train_run, jobs, chunksize=1)
    else:
        runs = [train_run(j) for j in jobs]
    wall = time.time() - t0

    settings = {k: v for k, v in vars(args).items() if k not in ("out", "figure", "results", "jobs")}
    result = {
        "what": "tools/scaling_training.py: the same tiny byte-level Llama trained with attention scale 1/sqrt(d_k), "
                "1 and 1/d_k (README.md, 'Why √d_k? Watch it train')",
        "settings": settings,
        "settings_summary": "d_model %d, %d layers, %d steps of %d×%d bytes" % (
            args.d_model, args.n_layers, args.steps, args.batch, args.seq),
        "scales": scales,
        "torch": torch.__version__,
        "threads_per_run": 1,
        "runs": [{k: v for k, v in r.items() if k not in ("model", "wall_seconds")} for r in runs],
        "timing": {"jobs": args.jobs, "wall_seconds": round(wall, 1),
                   "run_seconds": {r["name"]: r["wall_seconds"] for r in runs}},
    }
    json_path = os.path.join(args.out, "scaling_training.json")
    with open(json_path, "w") as f:
        json.dump(result, f, indent=1, ensure_ascii=False)
        f.write("\n")
    svg_path = os.path.join(args.out, "scaling_training.svg")
    with open(svg_path, "w") as f:
        f.write(svg_figure(result))
    if args.results:
        shutil.copyfile(json_path, args.results)
    if args.figure:
        shutil.copyfile(svg_path, args.figure)
    print(markdown_table(result))
    print("wall time %.1f min (%d runs, --jobs %d); wrote %s, %s, models in %s" % (
        wall / 60, len(runs), args.jobs, json_path, svg_path, os.path.join(args.out, "models")))


if __name__ == "__main__":
    main()
