#!/usr/bin/env bash
# The figures issue 19 targets, measured on this machine: one column of README's per-CPU table ("Block sizes from
# the machine, and the figures per CPU kind"), printed as Markdown rows, and the summary as JSON.
#
#   bench-gemm --only prefill      ours ÷ oneDNN over the prefill shapes: median, worst, how many below 0.9
#   bench-gemm ... --cold          the same with cold weights (each call reads them from DRAM), once: no target
#   sqrtdk bench                   134M-shape Llama prefill, % of the FMA peak measured in the same run
#   sqrtdk profile, in pairs       1 thread and 2 taken in turn; 2t ÷ 1t from the medians of the pairs
#   bench-attention (--attention)  rows where the engine's attention path is within 3% of the faster one
#   perf/ort_peer.py (--ort)       prefill and decode tokens/s ÷ ONNX Runtime's (onnxruntime-node), same model, interleaved
#
# perf/cpu_column_summary.py turns the folder into the column (a run on a busy host is shown apart, not counted).
# Every figure comes from runs made here, now, with the peers in the same runs; nothing is read from a cache but
# the attention path table, which `sqrtdk calibrate` measures first if this machine has none. Takes about 6 minutes
# (16 with --attention) on a 2-core VM. Needs a release build (./tools/run.sh makes one).
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
for tool in sqrtdk bench-gemm bench-attention bench-machine; do
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
  # The model every issue-19 figure is on: "the 134M Llama", stories110M's shape, f32, stored tied (110M parameters
  # in the file; 134M counted with its own head, the same FLOPs and bytes a step: README, docs/perf_history.md).
  [[ -f "$model" ]] || "$BIN/sqrtdk" make-toy -o "$model" --arch llama --d-model 768 --n-layers 12 --n-heads 12 \
    --d-ff 2048 --n-vocab 32000 --max-seq 1024 --tied --seed 1 >/dev/null
  "$BIN/sqrtdk" calibrate -m "$model" >/dev/null 2>&1 || log "attention calibration failed: the built-in rule applies"
fi
lscpu > "$out/lscpu.txt"

for i in 1 2; do
  log "bench-gemm --only prefill, run $i of 2"
  "$BIN/bench-gemm" --only prefill --json "${smoke_flag[@]}" > "$out/gemm_$i.json" 2>> "$out/log.txt"
done
# The same shapes with the weights read from DRAM, as a forward pass reads them (not a target: the engine's regime).
log "bench-gemm --only prefill --cold"
"$BIN/bench-gemm" --only prefill --cold --json "${smoke_flag[@]}" > "$out/gemm_cold.json" 2>> "$out/log.txt"
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

"$PYTHON" perf/cpu_column_summary.py "$out"
