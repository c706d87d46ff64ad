#!/usr/bin/env bash
# The figures issue 19 targets, measured on this machine: one column of README's per-CPU table ("Block sizes from
# the machine, and the figures per CPU kind"), printed as Markdown rows, and the summary as JSON.
#
#   bench-gemm --only prefill      ours ÷ oneDNN over the prefill shapes: median, worst, how many below 0.9
#   sqrtdk bench                   134M-shape Llama prefill, % of the FMA peak measured in the same run
#   sqrtdk profile, in pairs       1 thread and 2 taken in turn; 2t ÷ 1t from the medians of the pairs
#   bench-attention (--attention)  rows where the engine's attention path is within 3% of the faster one
#   perf/ort_peer.py (--ort)       prefill and decode tokens/s ÷ ONNX Runtime's (onnxruntime-node), same model, interleaved
#
# Every figure comes from runs made here, now, with the peers in the same runs; nothing is read from a cache but
# the attention path table, which `sqrtdk calibrate` measures first if this machine has none. Takes about 5 minutes
# (15 with --attention) on a 2-core VM. Needs a release build (./tools/run.sh makes one).
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: perf/cpu_column.sh [--runs N] [--pairs N] [--attention] [--ort] [--out DIR] [--smoke]
  --runs N     `sqrtdk bench` runs (default 5); bench-gemm runs twice
  --pairs N    interleaved 1-thread / 2-thread `sqrtdk profile` pairs at T = 128 (default 20; T = 512 takes N/2)
  --attention  also run bench-attention --reps 5 (about 10 minutes)
  --ort        also run perf/ort_peer.py: ONNX Runtime on the same model (about 5 minutes; installs python3-onnx and
               onnxruntime-node if missing: the npm registry must be reachable)
  --smoke      one tiny run of each on a tiny model (what CI runs so the script cannot rot; the figures mean nothing)
  --out DIR    where the raw JSON of every run, the tools' messages (log.txt) and summary.json go (default: a new
               folder under /tmp)
Environment: BIN (default build/release/bin), PYTHON (default /usr/bin/python3).
EOF
}

runs=5 pairs=20 attention=0 ort=0 out="" smoke=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --pairs) pairs="$2"; shift 2 ;;
    --attention) attention=1; shift ;;
    --ort) ort=1; shift ;;
    --smoke) smoke=1; shift ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "cpu_column.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
[[ "$runs" =~ ^[1-9][0-9]*$ && "$pairs" =~ ^[1-9][0-9]*$ ]] || { echo "cpu_column.sh: --runs and --pairs take a count ≥ 1" >&2; exit 2; }

cd "$(dirname "$0")/.."
BIN="${BIN:-build/release/bin}"
PYTHON="${PYTHON:-/usr/bin/python3}"
for tool in sqrtdk bench-gemm bench-attention; do
  [[ -x "$BIN/$tool" ]] || { echo "cpu_column.sh: $BIN/$tool not found: build first (./tools/run.sh)" >&2; exit 1; }
done
out="${out:-$(mktemp -d /tmp/sqrtdk-cpu-column.XXXXXX)}"
mkdir -p "$out"
log() { echo "cpu_column: $*" >&2; }
if [[ $smoke == 1 ]]; then
  runs=1 pairs=1
  smoke_flag=(--smoke) bench_flags=(--reps 1 --decode 2) model="$out/tiny.sqdk"
  "$BIN/sqrtdk" make-toy -o "$model" --arch llama --d-model 64 --n-layers 2 --n-heads 4 --d-ff 128 --n-vocab 256 \
    --max-seq 1024 --tied --seed 1 >/dev/null
else
  smoke_flag=() bench_flags=() model="$out/llama134m.sqdk"
  # The model every issue-19 figure is on: the stories110M-shape Llama, f32, tied embeddings (docs/perf_history.md).
  [[ -f "$model" ]] || "$BIN/sqrtdk" make-toy -o "$model" --arch llama --d-model 768 --n-layers 12 --n-heads 12 \
    --d-ff 2048 --n-vocab 32000 --max-seq 1024 --tied --seed 1 >/dev/null
  "$BIN/sqrtdk" calibrate -m "$model" >/dev/null 2>&1 || log "attention calibration failed: the built-in rule applies"
fi
lscpu > "$out/lscpu.txt"

for i in 1 2; do
  log "bench-gemm --only prefill, run $i of 2"
  "$BIN/bench-gemm" --only prefill --json "${smoke_flag[@]}" > "$out/gemm_$i.json" 2>> "$out/log.txt"
done
for i in $(seq "$runs"); do
  log "sqrtdk bench, run $i of $runs"
  "$BIN/sqrtdk" bench -m "$model" -q --json "${bench_flags[@]}" > "$out/bench_$i.json" 2>> "$out/log.txt"
done
# The host's cores and DRAM around the pairs (they carry no roofs of their own): bench-machine before, between and
# after them, so a busy host shows beside the ratio it skewed.
probe() {
  "$BIN/bench-machine" --threads 1,2 --reps 3 --json "${smoke_flag[@]}" > "$out/probe_$1.json" 2>> "$out/log.txt"
}
probe 1
for T in 128 512; do
  n=$pairs
  [[ $T == 512 ]] && n=$(( (pairs + 1) / 2 ))
  log "sqrtdk profile, $n pairs at T = $T"
  for i in $(seq "$n"); do
    for t in 1 2; do
      "$BIN/sqrtdk" profile -m "$model" -t "$t" --prefill "$T" --decode 0 -q --json \
        > "$out/profile_T${T}_t${t}_$i.json" 2>> "$out/log.txt"
    done
  done
  if [[ $T == 128 ]]; then probe 2; else probe 3; fi
done
if [[ $attention == 1 ]]; then
  log "bench-attention --reps 5"
  "$BIN/bench-attention" --reps 5 --json "${smoke_flag[@]}" > "$out/attention.json" 2>> "$out/log.txt"
fi
if [[ $ort == 1 && $smoke == 0 ]]; then
  log "perf/ort_peer.py (ONNX Runtime on the same model)"
  "$PYTHON" perf/ort_peer.py --model "$model" --bin "$BIN" --json > "$out/ort.json" 2>> "$out/log.txt"
fi

"$PYTHON" - "$out" <<'EOF'
import glob, json, os, statistics, sys

out = sys.argv[1]
load = lambda path: json.load(open(path))
lscpu = dict(line.split(":", 1) for line in open(os.path.join(out, "lscpu.txt")) if ":" in line)
cpu = {k: lscpu.get(k, "?").strip() for k in ("Model name", "CPU family", "Model")}
summary = {"cpu": cpu, "raw": out}
rows = []

def span(values, fmt="{:.0f}"):
    if not values:
        return "—"
    lo, hi = min(values), max(values)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else fmt.format(lo) + "–" + fmt.format(hi)

# A busy host: on a shared VM another tenant can hold one of our two vCPUs for minutes, and every 2-thread figure of
# that stretch means nothing (bench-gemm "2.46x oneDNN", a 2t/1t of 1.31). Each run measures its FMA roof at 1 and 2
# threads (bench-gemm and `sqrtdk bench` before and after their cases, the higher kept; bench-machine probes around
# the profile pairs); a run whose 2-thread roof is under BUSY_BELOW x its 1-thread one is shown apart and left out
# of the verdicts. Quiet runs on Zen 5 read 1.88-2.07 (40 runs, 2026-12-02..07); the busy stretch of 2026-12-07's
# fifth sitting read 0.96-1.22.
BUSY_BELOW = 1.75

def roof_ratio(roofs, key):
    by_t = {r["threads"]: r.get(key) for r in roofs}
    return by_t[2] / by_t[1] if by_t.get(1) and by_t.get(2) else None  # None: a one-thread (--smoke) run

def is_busy(ratio):
    return ratio is not None and ratio < BUSY_BELOW

peaks = {1: [], 2: []}
gemm = {1: [], 2: []}
for path in sorted(glob.glob(os.path.join(out, "gemm_*.json"))):
    d = load(path)
    ratio = roof_ratio(d["machine"]["roofs"], "fma_peak_gflops")
    for r in d["machine"]["roofs"]:
        peaks[r["threads"]].append(r["fma_peak_gflops"])
        cpu["L1d per core, KiB"] = r["l1d_bytes_per_core"] >> 10
        cpu["L2 per core, KiB"] = r["l2_bytes_per_core"] >> 10
    for t in (1, 2):
        res = [r for r in d["results"] if r["threads"] == t]
        if not res:  # a --smoke run times one case at one thread
            continue
        ratios = [r["ratio_onednn"] for r in res]
        # A share above the roof is null in the JSON (printed `roof?`: the roof read low): counted, not a median.
        pcts = [r["pct_peak"] for r in res if r["pct_peak"] is not None]
        gemm[t].append({"shapes": len(res), "median": statistics.median(ratios), "worst": min(ratios),
                        "below_0_9": sum(x < 0.9 for x in ratios),
                        "pct_peak_median": statistics.median(pcts) if pcts else None,
                        "above_roof": len(res) - len(pcts), "peak_2t_over_1t": ratio, "host_busy": is_busy(ratio)})
summary["bench_gemm"] = gemm

bench = {1: {}, 2: {}}
bench_ratios = []  # each run's 2t ÷ 1t FMA roof
bench_dram = {1: [], 2: []}  # each run's DRAM read roof: at T <= 128 the weights stream from DRAM as fast as it gives
for path in sorted(glob.glob(os.path.join(out, "bench_*.json"))):
    d = load(path)
    ratio = roof_ratio(d["machine"]["roofs"], "fma_peak_gflops")
    bench_ratios.append(ratio)
    for r in d["machine"]["roofs"]:
        peaks[r["threads"]].append(r["fma_peak_gflops"])
        if r.get("dram_read_gbs"):
            bench_dram[r["threads"]].append(r["dram_read_gbs"])
    for res in d["results"]:
        for p in res["prefill"]:
            bench[res["threads"]].setdefault(p["tokens"], []).append(
                (p["tokens_per_s"], p["pct_of_roofline"], is_busy(ratio)))
summary["sqrtdk_bench"] = {t: {T: {"tokens_per_s": [v[0] for v in vals], "pct_of_fma_peak": [v[1] for v in vals],
                                   "host_busy": [v[2] for v in vals]}
                                for T, vals in by_t.items()} for t, by_t in bench.items()}
summary["sqrtdk_bench_peak_2t_over_1t"] = bench_ratios

def prefill_seconds(path):
    return load(path)["phases"]["prefill"]["seconds"]

def probe(n):  # bench-machine's roofs around the pairs: (FMA 2t ÷ 1t, DRAM read 2t ÷ 1t)
    path = os.path.join(out, f"probe_{n}.json")
    if not os.path.exists(path):
        return None, None
    roofs = load(path)["machine"]["roofs"]
    return roof_ratio(roofs, "fma_peak_gflops"), roof_ratio(roofs, "dram_read_gbs")

scaling = {}
for T, probes in ((128, (1, 2)), (512, (2, 3))):
    one = [prefill_seconds(p) for p in sorted(glob.glob(os.path.join(out, f"profile_T{T}_t1_*.json")))]
    two = [prefill_seconds(p) for p in sorted(glob.glob(os.path.join(out, f"profile_T{T}_t2_*.json")))]
    if one and two:
        host = [probe(n) for n in probes]
        fma = [f for f, _ in host if f is not None]
        dram = [m for _, m in host if m is not None]
        scaling[T] = {"pairs": len(one), "t1_ms": 1e3 * statistics.median(one), "t2_ms": 1e3 * statistics.median(two),
                      "ratio": statistics.median(one) / statistics.median(two),
                      "host_fma_2t_over_1t": fma, "host_dram_2t_over_1t": dram, "host_busy": any(map(is_busy, fma))}
summary["scaling_2t_over_1t"] = scaling

if os.path.exists(os.path.join(out, "attention.json")):
    a = load(os.path.join(out, "attention.json"))["auto"]
    summary["attention"] = {"rows": a["rows"], "within_3pct": a["rows_within_3pct"], "worst_loss": a["worst_loss"],
                            "worst_at": a["worst_at"]}

json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)

def bold(text, met):
    return f"**{text}**" if met else text

rows.append(f"| | {cpu['Model name']} (family {cpu['CPU family']} model {cpu['Model']}; "
            f"{cpu.get('L1d per core, KiB', '?')} KiB L1d, {cpu.get('L2 per core, KiB', '?')} KiB L2) |")
rows.append(f"| FMA peak 1t / 2t, GFLOP/s | {span(peaks[1])} / {span(peaks[2])} (in-run) |")
busy_note = lambda ratios: (f"; the 2-thread FMA roof read {span(ratios, '{:.2f}')}x the 1-thread one: "
                            f"another tenant held a vCPU, not counted")
for t in (1, 2):
    g = [x for x in gemm[t] if not x["host_busy"]]
    busy = [x for x in gemm[t] if x["host_busy"]]
    text = "—"
    if g:
        met = all(x["median"] >= 1.0 and x["below_0_9"] == 0 for x in g)
        text = bold(f"{span([x['median'] for x in g], '{:.3f}')} ({span([x['worst'] for x in g], '{:.2f}')})", met)
        text += f": {len(g)} runs, below 0.9: " + ", ".join(str(x["below_0_9"]) for x in g)
    if busy:
        text += (f" ({len(busy)} on a busy host: {span([x['median'] for x in busy], '{:.3f}')} "
                 f"({span([x['worst'] for x in busy], '{:.2f}')}){busy_note([x['peak_2t_over_1t'] for x in busy])})")
    if gemm[t]:
        rows.append(f"| bench-gemm ÷ oneDNN, {t}t: median (worst) | {text} |")
pct_span = lambda values: span(values) + "%" if values else "—"
known = lambda values: [v for v in values if v is not None]
above = sum(x["above_roof"] for t in (1, 2) for x in gemm[t])
quiet = lambda runs: [x for x in runs if not x["host_busy"]]
rows.append("| bench-gemm % of FMA peak, median, 1t / 2t | "
            f"{pct_span(known([x['pct_peak_median'] for x in quiet(gemm[1])]))} / "
            f"{pct_span(known([x['pct_peak_median'] for x in quiet(gemm[2])]))}"
            + (f" ({above} shape(s) above the roof measured in their run: `roof?`)" if above else "") + " |")
targets = {32: 60.0, 128: 75.0, 512: 75.0}
for t in (1, 2):
    if not bench[t]:
        continue
    cells = []
    for T in sorted(bench[t]):
        runs = [v for v in bench[t][T] if not v[2]]
        if not runs:
            cells.append("—")
            continue
        tok = [v[0] for v in runs]
        pct = known([v[1] for v in runs])  # null: above the roof measured in that run (`roof?`)
        if not pct:
            cells.append(f"{span(tok)} (roof?)")
            continue
        med = statistics.median(pct)
        cells.append(bold(f"{span(tok)} ({span(pct)}%, median {med:.0f}%)", med >= targets.get(T, 0)))
    n_busy = sum(is_busy(r) for r in bench_ratios)
    note = ""
    if n_busy:
        busy = {T: [v for v in vals if v[2]] for T, vals in sorted(bench[t].items())}
        note = (f"; {n_busy} on a busy host: " + " / ".join(span([v[0] for v in b]) for b in busy.values())
                + busy_note([r for r in bench_ratios if is_busy(r)]))
    dram = f"; the DRAM read roof in-run {span(bench_dram[t])} GB/s" if bench_dram[t] else ""
    rows.append(f"| `sqrtdk bench` prefill T = {' / '.join(str(T) for T in sorted(bench[t]))}, {t}t (% peak) | "
                + " / ".join(cells) + f" ({len(bench_ratios) - n_busy} run(s) on a whole host{dram}{note}) |")
if scaling:
    cells = [bold(f"{scaling[T]['ratio']:.2f}", scaling[T]["ratio"] >= 1.9 and not scaling[T]["host_busy"])
             + (" (busy host: not a verdict)" if scaling[T]["host_busy"] else "") for T in sorted(scaling)]
    pairs = " / ".join(str(scaling[T]["pairs"]) for T in sorted(scaling))
    fma = [f for T in scaling for f in scaling[T]["host_fma_2t_over_1t"]]
    dram = [m for T in scaling for m in scaling[T]["host_dram_2t_over_1t"]]
    host = (f"; bench-machine before, between and after: FMA peak 2t ÷ 1t {span(fma, '{:.2f}')}, DRAM read 2t ÷ 1t "
            f"{span(dram, '{:.2f}')}" if fma and dram else "")
    rows.append(f"| 2t ÷ 1t prefill at T = {' / '.join(str(T) for T in sorted(scaling))} | {' / '.join(cells)} "
                f"(`sqrtdk profile`, medians of {pairs} interleaved pairs{host}) |")
if "attention" in summary:
    a = summary["attention"]
    rows.append(f"| attention path within 3% of the faster | {bold(str(a['within_3pct']) + ' of ' + str(a['rows']), a['within_3pct'] == a['rows'])}"
                f" (worst +{100 * a['worst_loss']:.1f}%: {a['worst_at']}) |")
if os.path.exists(os.path.join(out, "ort.json")):
    o = load(os.path.join(out, "ort.json"))
    summary["onnxruntime"] = o["rows"]
    json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
    for t in sorted({r["threads"] for r in o["rows"]}):
        rs = [r for r in o["rows"] if r["threads"] == t and r["phase"] == "prefill"]
        dec = [r for r in o["rows"] if r["threads"] == t and r["phase"] == "decode"]
        rows.append(f"| ÷ ONNX Runtime {o['onnxruntime_node']}, prefill T = {' / '.join(str(r['tokens']) for r in rs)}"
                    + (", decode" if dec else "") + f", {t}t | "
                    + " / ".join(f"{r['ratio']:.2f}" for r in rs + dec)
                    + f" (`perf/ort_peer.py`, medians of {o['rounds']} interleaved rounds) |")
print("\n".join(rows))
print(f"\n(bold: the issue-19 target met; raw JSON and summary.json in {out})")
EOF
