#!/usr/bin/env bash
# Issue 9's benchmark: `dtrain bench train` (synthetic data, tf_cnn_benchmarks'
# method) against the PyTorch eager peer bench/peer/pytorch_train_bench.py
# (same torchvision model, batch, AMP and memory format; DDP under torchrun's
# variables, Gloo on CPU) in one run, rounds alternating which goes first.
# Usually started as `bench/train_vs_pytorch.sh --synthetic ...`.
#
#   bench/train_synthetic_vs_pytorch.sh [--model resnet18] [--batch-size 16]
#       [--image-size 112] [--num-classes 1000] [--amp none|bf16|fp16]
#       [--channels-last] [--nproc 2] [--threads 1] [--steps 10]
#       [--warmup-steps 2] [--rounds 2] [--device cpu] [--build DIR]
#       [--out DIR] [--timeout SECS]
#
# Prints each run's "total images/sec", then the median over rounds of each
# and the ratio dtrain/pytorch, the achieved TFLOP/s of both (6 x forward
# multiply-adds of convolutions and linear layers per image x images/sec;
# docs/benchmarks.md) and, on a GPU, both peak memories next to the GPU's.
# Logs and JSON results stay in --out.
#
# Environment:
#   DTRAIN_PEER_PYTHON  the peer's Python, with torch and torchvision (default:
#                       the one with dtrain's LibTorch version, bench/peer_python.sh:
#                       scripts/peer-torch.sh's venv for 2.x, /usr/bin/python3 for
#                       Debian's 1.13; on the GPU machine the python3 that has its torch)
#   DTRAIN_PEAK_TFLOPS  the device's peak TFLOP/s for this precision (e.g. 989
#                       for an H200's dense bf16/fp16), to print each side's
#                       share of it; unset: not printed
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=bench/peer_python.sh
source "$HERE/peer_python.sh"

MODEL=resnet18 BATCH=16 IMAGE=112 CLASSES=1000 AMP=none CL=0 NPROC=2 THREADS=1
STEPS=10 WARMUP=2 ROUNDS=2 DEVICE=cpu BUILD=$ROOT/build OUT= TIMEOUT=900

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
while [[ $# -gt 0 ]]; do
    case "$1" in
        --model) MODEL=$2; shift 2 ;;
        --batch-size) BATCH=$2; shift 2 ;;
        --image-size) IMAGE=$2; shift 2 ;;
        --num-classes) CLASSES=$2; shift 2 ;;
        --amp) AMP=$2; shift 2 ;;
        --channels-last) CL=1; shift ;;
        --nproc) NPROC=$2; shift 2 ;;
        --threads) THREADS=$2; shift 2 ;;
        --steps) STEPS=$2; shift 2 ;;
        --warmup-steps) WARMUP=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --device) DEVICE=$2; shift 2 ;;
        --build) BUILD=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --timeout) TIMEOUT=$2; shift 2 ;;
        -h|--help) usage 0 ;;
        *) echo "unknown argument: $1" >&2; usage 2 ;;
    esac
done
for v in BATCH IMAGE CLASSES NPROC STEPS ROUNDS TIMEOUT; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "--${v,,} must be a positive integer" >&2; exit 2; }
done
[[ $AMP == none || $AMP == bf16 || $AMP == fp16 ]] || { echo "--amp none|bf16|fp16" >&2; exit 2; }
DTRAIN=$BUILD/dtrain
[[ -x $DTRAIN ]] || { echo "$DTRAIN not built (cmake --build $BUILD --target dtrain)" >&2; exit 1; }
peer_select "$DTRAIN" || exit 1
PY=$PEER_PY
OUT=${OUT:-$(mktemp -d /tmp/dtrain-train-synthetic.XXXXXX)}
# Runs still going when this script ends (interrupted) are stopped with it.
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
mkdir -p "$OUT"

free_port() {
    "${PEER_ENV[@]}" "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

COMMON=(--model "$MODEL" --batch-size "$BATCH" --image-size "$IMAGE" --num-classes "$CLASSES"
        --amp "$AMP" --threads "$THREADS" --steps "$STEPS" --warmup-steps "$WARMUP"
        --display-every "$STEPS" --device "$DEVICE" --json)
[[ $CL == 1 ]] && COMMON+=(--channels-last)

run_dtrain() {  # $1: log file
    timeout -k 10 "$TIMEOUT" "$DTRAIN" run --nproc-per-node "$NPROC" -- \
        "$DTRAIN" bench train "${COMMON[@]}" >"$1" 2>&1
}
# Note: the peer's ranks get torchrun's variables directly; Debian's
# torch.distributed.run 1.13 fails under this Python (redirects map is None).
run_peer() {    # $1: log file
    local port r rc=0 pids=()
    port=$(free_port)
    for ((r = 0; r < NPROC; r++)); do
        env RANK=$r LOCAL_RANK=$r WORLD_SIZE=$NPROC LOCAL_WORLD_SIZE=$NPROC MASTER_ADDR=127.0.0.1 \
            MASTER_PORT="$port" OMP_NUM_THREADS="$THREADS" timeout -k 10 "$TIMEOUT" \
            "${PEER_ENV[@]}" "$PY" "$HERE/peer/pytorch_train_bench.py" "${COMMON[@]}" >>"$1" 2>&1 &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
    return $rc
}

echo "== ${MODEL} ${IMAGE}px, batch ${BATCH}/process x ${NPROC} processes x ${THREADS} thread(s)," \
     "amp ${AMP}, channels_last ${CL}, ${STEPS} timed + ${WARMUP} warm-up steps, ${ROUNDS} round(s); logs in $OUT" >&2
peer_versions | tee "$OUT/versions.txt" >&2
rm -f "$OUT/load.txt"
for ((r = 1; r <= ROUNDS; r++)); do
    order=(dtrain peer); (( r % 2 == 0 )) && order=(peer dtrain)
    for impl in "${order[@]}"; do
        log=$OUT/$impl.round$r.log
        load=$(uptime | sed 's/.*load average: //')
        echo "$impl $r $load" >>"$OUT/load.txt"
        if "run_$impl" "$log"; then
            echo "   round $r $impl: $(grep -a 'total images/sec: ' "$log" | tail -n 1 | sed 's/^\[rank[0-9]*\]: //')" \
                 "(load before: $load)" >&2
        else
            echo "   round $r $impl FAILED (rc $?), $log:" >&2; tail -n 15 "$log" >&2; exit 1
        fi
    done
done

"${PEER_ENV[@]}" "$PY" - "$OUT" "$ROUNDS" "${DTRAIN_PEAK_TFLOPS:-}" <<'EOF'
import json, statistics, sys
out, rounds, peak = sys.argv[1], int(sys.argv[2]), float(sys.argv[3] or 0)
def result(impl, r):
    found = None
    for line in open(f"{out}/{impl}.round{r}.log", errors="replace"):
        i = line.find("{")
        if i >= 0 and '"images_per_sec"' in line:
            found = json.loads(line[i:])
    return found
res = {impl: [result(impl, r) for r in range(1, rounds + 1)] for impl in ("dtrain", "peer")}
ips = {impl: statistics.median(x["images_per_sec"] for x in v) for impl, v in res.items()}
j = res["dtrain"][0]
print(open(f"{out}/versions.txt").read().strip())
print(f"model {j['model']} {j['image_size']}px, batch {j['batch_size']} x {j['world_size']} processes, "
      f"amp {j['amp']}, channels_last {j['channels_last']}, device {j['device']}")
print(f"{'':24s} {'dtrain':>12s} {'pytorch':>12s} {'dtrain/pytorch':>15s}")
print(f"{'total images/sec':24s} {ips['dtrain']:12.2f} {ips['peer']:12.2f} {ips['dtrain'] / ips['peer']:15.3f}")
print(f"{'  per round':24s} " + " ".join(f"{x['images_per_sec']:.2f}" for x in res["dtrain"]) + "  |  "
      + " ".join(f"{x['images_per_sec']:.2f}" for x in res["peer"]))
# Achieved TFLOP/s at the median rate, from each side's own count of the
# forward's multiply-adds (they agree for the same model and size).
tf = {impl: 6 * v[0].get("forward_gmacs", 0) * ips[impl] / 1e3 for impl, v in res.items()}
loads = [l.split(None, 2) for l in open(f"{out}/load.txt")]
print(f"{'  load before (1 min)':24s} " + " ".join(l[2].split(",")[0] for l in loads if l[0] == "dtrain") + "  |  "
      + " ".join(l[2].split(",")[0] for l in loads if l[0] == "peer"))
print(f"{'achieved TFLOP/s':24s} {tf['dtrain']:12.3f} {tf['peer']:12.3f}"
      f"   ({j.get('forward_gmacs', 0):.3f} GMACs per image forward, x6 per training step)")
if peak > 0:
    print(f"{'  share of ' + format(peak, 'g') + ' peak':24s} {100 * tf['dtrain'] / peak / j['world_size']:11.1f}% "
          f"{100 * tf['peer'] / peak / j['world_size']:11.1f}%   (per device)")
mem = {impl: max((x.get("peak_mem_gib") or 0) for x in v) for impl, v in res.items()}
total = j.get("gpu_mem_gib")
if total:
    print(f"{'peak GPU memory (GiB)':24s} {mem['dtrain']:12.2f} {mem['peer']:12.2f}   of {total:.2f} GiB"
          f" ({100 * mem['dtrain'] / total:.0f}% and {100 * mem['peer'] / total:.0f}%)")
else:
    print(f"{'peak GPU memory':24s} {'n/a':>12s} {'n/a':>12s}   (device {j['device']})")
json.dump({"dtrain": res["dtrain"], "pytorch": res["peer"], "ratio": ips["dtrain"] / ips["peer"],
           "tflops": {"dtrain": tf["dtrain"], "pytorch": tf["peer"]},
           "peak_mem_gib": {"dtrain": mem["dtrain"], "pytorch": mem["peer"]} if total else None},
          open(f"{out}/summary.json", "w"), indent=1)
EOF
