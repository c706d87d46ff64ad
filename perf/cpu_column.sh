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

peaks = {1: [], 2: []}
gemm = {1: [], 2: []}
for path in sorted(glob.glob(os.path.join(out, "gemm_*.json"))):
    d = load(path)
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
                        "above_roof": len(res) - len(pcts)})
summary["bench_gemm"] = gemm

bench = {1: {}, 2: {}}
for path in sorted(glob.glob(os.path.join(out, "bench_*.json"))):
    d = load(path)
    for r in d["machine"]["roofs"]:
        peaks[r["threads"]].append(r["fma_peak_gflops"])
    for res in d["results"]:
        for p in res["prefill"]:
            bench[res["threads"]].setdefault(p["tokens"], []).append((p["tokens_per_s"], p["pct_of_roofline"]))
summary["sqrtdk_bench"] = {t: {T: {"tokens_per_s": [v[0] for v in vals], "pct_of_fma_peak": [v[1] for v in vals]}
                                for T, vals in by_t.items()} for t, by_t in bench.items()}

def prefill_seconds(path):
    return load(path)["phases"]["prefill"]["seconds"]

scaling = {}
for T in (128, 512):
    one = [prefill_seconds(p) for p in sorted(glob.glob(os.path.join(out, f"profile_T{T}_t1_*.json")))]
    two = [prefill_seconds(p) for p in sorted(glob.glob(os.path.join(out, f"profile_T{T}_t2_*.json")))]
    if one and two:
        scaling[T] = {"pairs": len(one), "t1_ms": 1e3 * statistics.median(one), "t2_ms": 1e3 * statistics.median(two),
                      "ratio": statistics.median(one) / statistics.median(two)}
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
for t in (1, 2):
    g = gemm[t]
    if not g:
        continue
    met = all(x["median"] >= 1.0 and x["below_0_9"] == 0 for x in g)
    text = (f"{span([x['median'] for x in g], '{:.3f}')} ({span([x['worst'] for x in g], '{:.2f}')})")
    below = ", ".join(str(x["below_0_9"]) for x in g)
    rows.append(f"| bench-gemm ÷ oneDNN, {t}t: median (worst) | {bold(text, met)}: {len(g)} runs, below 0.9: {below} |")
pct_span = lambda values: span(values) + "%" if values else "—"
known = lambda values: [v for v in values if v is not None]
above = sum(x["above_roof"] for t in (1, 2) for x in gemm[t])
rows.append("| bench-gemm % of FMA peak, median, 1t / 2t | "
            f"{pct_span(known([x['pct_peak_median'] for x in gemm[1]]))} / "
            f"{pct_span(known([x['pct_peak_median'] for x in gemm[2]]))}"
            + (f" ({above} shape(s) above the roof measured in their run: `roof?`)" if above else "") + " |")
targets = {32: 60.0, 128: 75.0, 512: 75.0}
for t in (1, 2):
    if not bench[t]:
        continue
    cells = []
    for T in sorted(bench[t]):
        tok = [v[0] for v in bench[t][T]]
        pct = known([v[1] for v in bench[t][T]])  # null: above the roof measured in that run (`roof?`)
        if not pct:
            cells.append(f"{span(tok)} (roof?)")
            continue
        med = statistics.median(pct)
        cells.append(bold(f"{span(tok)} ({span(pct)}%, median {med:.0f}%)", med >= targets.get(T, 0)))
    rows.append(f"| `sqrtdk bench` prefill T = {' / '.join(str(T) for T in sorted(bench[t]))}, {t}t (% peak) | "
                + " / ".join(cells) + f" ({len(next(iter(bench[t].values())))} run(s)) |")
if scaling:
    cells = [bold(f"{scaling[T]['ratio']:.2f}", scaling[T]["ratio"] >= 1.9) for T in sorted(scaling)]
    pairs = " / ".join(str(scaling[T]["pairs"]) for T in sorted(scaling))
    rows.append(f"| 2t ÷ 1t prefill at T = {' / '.join(str(T) for T in sorted(scaling))} | {' / '.join(cells)} "
                f"(`sqrtdk profile`, medians of {pairs} interleaved pairs) |")
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
