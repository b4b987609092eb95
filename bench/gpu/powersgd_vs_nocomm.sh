#!/usr/bin/env bash
# Issue 20 on a GPU machine: training images/s of VGG-16 with PowerSGD against
# the same job with no gradient communication at all (--comm-hook noop, the
# goal's "no communication" rate), dtrain's `bench train` beside PyTorch's
# powerSGD_hook (bench/peer/pytorch_train_bench.py, the machine's torch), the
# same model, batch, hooks and launcher (`dtrain run`), one run after the
# other, the order alternating by round.
#
#   bash bench/gpu/powersgd_vs_nocomm.sh        (scripts/gpu-check.sh runs it)
#
# Two processes. With fewer GPUs than processes they share the GPU (time-
# sliced by the driver, so both sides and every hook share it alike) and talk
# over Gloo, which stages CUDA tensors through the host; with a GPU each,
# over NCCL. The link, the first of these that works here:
#   netns     rank 0 and rank 1 in two network namespaces joined by a veth pair,
#             each direction shaped to DTRAIN_SHAPE_RATE (default 1gbit) with
#             tc tbf (bench/netns/netns.sh; needs ip, tc and root), both
#             processes on GPU 0, started with RANK/WORLD_SIZE/MASTER_ADDR as
#             `dtrain run` would (OMP_NUM_THREADS=1, LOCAL_RANK=0);
#   loopback  shaped to DTRAIN_SHAPE_RATE with tc tbf (one token bucket for
#             both directions), the processes started by `dtrain run`;
#   loopback  as it is, and the report says so.
#
# Environment: DTRAIN_BUILD_DIR (default <repo>/build-gpu), DTRAIN_GPU_OUT
# (logs and the report; default /tmp/dtrain-powersgd-gpu), DTRAIN_PEER_PYTHON
# (the peer: bench/peer_python.sh's choice, the machine's python3 on a GPU
# machine), and MODEL (vgg16), BATCH (32 per process), SIZE (224),
# STEPS (20), WARMUP (5), ROUNDS (1), HOOKS ("noop powersgd:1 powersgd:4
# fp16"), DEVICE (cuda), DTRAIN_SHAPE_RATE (1gbit; "none": no shaping).
set -uo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${DTRAIN_BUILD_DIR:-$REPO_ROOT/build-gpu}"
OUT="${DTRAIN_GPU_OUT:-/tmp/dtrain-powersgd-gpu}"
# shellcheck source=bench/peer_python.sh
source "$REPO_ROOT/bench/peer_python.sh"
peer_select "$BUILD/dtrain" || exit 1
PY=("${PEER_ENV[@]}" "$PEER_PY")
MODEL="${MODEL:-vgg16}"
BATCH="${BATCH:-32}"
SIZE="${SIZE:-224}"
STEPS="${STEPS:-20}"
WARMUP="${WARMUP:-5}"
ROUNDS="${ROUNDS:-1}"
HOOKS="${HOOKS:-noop powersgd:1 powersgd:4 fp16}"
DEVICE="${DEVICE:-cuda}"
RATE="${DTRAIN_SHAPE_RATE:-1gbit}"
NPROC=2
mkdir -p "$OUT"
REPORT="$OUT/report.md"

gpus="$("${PY[@]}" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)"
backend=gloo
[[ "$DEVICE" == cuda && "$gpus" -ge "$NPROC" ]] && backend=nccl

NETNS="$REPO_ROOT/bench/netns/netns.sh"
mode=loopback
link="loopback, not shaped"
if [[ "$RATE" != none && "$backend" == gloo ]] && command -v ip >/dev/null 2>&1 &&
  bash "$NETNS" check 2>"$OUT/netns.err" &&
  DTRAINBENCH_RATE="$RATE" bash "$NETNS" up >"$OUT/netns.log" 2>&1; then
  mode=netns
  trap 'bash "$NETNS" down >/dev/null 2>&1' EXIT
  timeout 30 bash "$NETNS" verify >>"$OUT/netns.log" 2>&1 || true
  link="two network namespaces over a veth pair, each direction shaped to $RATE (tc tbf); $(grep -o 'verify: .*' "$OUT/netns.log" | head -n1)"
elif [[ "$RATE" != none ]] && command -v tc >/dev/null 2>&1 &&
  tc qdisc replace dev lo root tbf rate "$RATE" burst 1mbit latency 200ms 2>"$OUT/tc.err"; then
  link="loopback shaped to $RATE (tc tbf, both directions in one bucket)"
  trap 'tc qdisc del dev lo root 2>/dev/null' EXIT
elif [[ "$RATE" != none ]]; then
  link="loopback, not shaped ($(command -v tc >/dev/null 2>&1 && head -c 200 "$OUT/tc.err" || echo 'no tc here'))"
fi

# run IMPL HOOK LOG: one job of NPROC processes; prints its images/s (or "-").
run() {
  local impl="$1" hook="$2" log="$3" name="${2%%:*}" rank="${2#*:}" args
  [[ "$rank" == "$2" ]] && rank=1
  args=(--model "$MODEL" --batch-size "$BATCH" --image-size "$SIZE" --steps "$STEPS"
    --warmup-steps "$WARMUP" --device "$DEVICE" --backend "$backend" --json)
  if [[ "$name" == powersgd ]]; then
    args+=(--comm-hook powersgd --powersgd-rank "$rank" --powersgd-start-iter 2)
  elif [[ "$impl" == pytorch && "$name" == none ]]; then
    args+=(--comm-hook allreduce)
  else
    args+=(--comm-hook "$name")
  fi
  local cmd=("$BUILD/dtrain" bench train "${args[@]}")
  [[ "$impl" == dtrain ]] || cmd=("${PY[@]}" "$REPO_ROOT/bench/peer/pytorch_train_bench.py" "${args[@]}")
  if [[ "$mode" == netns ]]; then
    # One process per namespace; rank 0's log is the job's. A carried ip
    # (scripts/gpu-check.sh) hands its own LD_LIBRARY_PATH on: ours is put back.
    local r port=$((29500 + RANDOM % 2000)) pids=()
    for ((r = 0; r < NPROC; r++)); do
      bash "$NETNS" exec "$r" env LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" \
        RANK="$r" WORLD_SIZE="$NPROC" LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 OMP_NUM_THREADS=1 \
        MASTER_ADDR=10.213.0.1 MASTER_PORT="$port" GLOO_SOCKET_IFNAME="dtb$r" \
        timeout --kill-after=10 300 "${cmd[@]}" >"$log.rank$r" 2>&1 &
      pids+=("$!")
    done
    wait "${pids[@]}"
    cat "$log.rank0" >"$log"
  else
    timeout --kill-after=10 300 "$BUILD/dtrain" run --nproc-per-node "$NPROC" -- "${cmd[@]}" >"$log" 2>&1
  fi
  python3 - "$log" <<'PY'
import json, sys
ips = "-"
for line in open(sys.argv[1], errors="replace"):
    line = line.strip()
    if "{" in line and "images_per_sec" in line:
        try:
            ips = "%.1f" % json.loads(line[line.index("{"):])["images_per_sec"]
        except ValueError:
            pass
print(ips)
PY
}

declare -A RESULT
for ((round = 1; round <= ROUNDS; round++)); do
  for hook in $HOOKS; do
    order=(dtrain pytorch)
    ((round % 2 == 0)) && order=(pytorch dtrain)
    for impl in "${order[@]}"; do
      ips="$(run "$impl" "$hook" "$OUT/$impl.${hook/:/-}.round$round.log")"
      echo "round $round  $impl  $hook  $ips images/s"
      RESULT["$impl|$hook"]+="$ips "
    done
  done
done

{
  echo "# PowerSGD against no communication, $MODEL on $DEVICE ($(date -u +%FT%TZ))"
  echo
  echo "$NPROC processes, $gpus GPU(s) ($backend), batch $BATCH per process, ${SIZE} px,"
  echo "$WARMUP warm-up and $STEPS timed steps, $ROUNDS round(s); link: $link."
  echo "PowerSGD from iteration 2 (every timed step compressed), error feedback and warm start on."
  echo "$(peer_versions)."
  echo
  echo "| hook | dtrain images/s | PyTorch images/s | dtrain/PyTorch | dtrain / its noop | PyTorch / its noop |"
  echo "|---|---|---|---|---|---|"
  python3 - "$HOOKS" "$(for k in "${!RESULT[@]}"; do printf '%s=%s;' "$k" "${RESULT[$k]}"; done)" <<'PY'
import statistics, sys
hooks = sys.argv[1].split()
res = {}
for item in sys.argv[2].split(";"):
    if "=" in item:
        k, v = item.split("=", 1)
        res[k] = [float(x) for x in v.split() if x != "-"]
med = {k: statistics.median(v) if v else None for k, v in res.items()}
def cell(x): return "-" if x is None else "%.1f" % x
def ratio(a, b): return "-" if a is None or b is None or b == 0 else "%.2f" % (a / b)
for h in hooks:
    d, p = med.get("dtrain|" + h), med.get("pytorch|" + h)
    dn, pn = med.get("dtrain|noop"), med.get("pytorch|noop")
    print(f"| {h} | {cell(d)} | {cell(p)} | {ratio(d, p)} | {ratio(d, dn)} | {ratio(p, pn)} |")
PY
} >"$REPORT"
cat "$REPORT"
