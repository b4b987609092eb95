#!/usr/bin/env bash
# Issue 20, item 3's recorded benchmark: ResNet-18 with PowerSGD keeps plain
# allreduce's test accuracy "within 1 point over several seeds". For each seed,
# two runs of `dtrain run --nproc-per-node 2 -- dtrain train --model resnet18
# --dataset fashion-mnist`, one with plain allreduce and one with
# --comm-hook powersgd (rank --rank, compressing from iteration --start-iter,
# default 10; error feedback and warm start on), the same seed, data order and
# schedule; the
# final epoch's test accuracy of each (from --metrics-file), their difference,
# and the mean and largest difference over the seeds, as a Markdown table.
# (The CNN's 3-epoch check is a test: PowerSGDAccuracy.*, label slow.)
#
#   bench/powersgd_accuracy.sh [--build DIR] [--seeds "0 1 2"] [--epochs 1]
#       [--rank 2] [--batch-size 64] [--lr 0.01] [--threads 1] [--out DIR]
#       [--runs "allreduce powersgd"] [--start-iter 10] [--schedule constant]
#
# --start-iter is PowerSGD's start_powerSGD_iter (plain allreduce before it;
# PyTorch's default is 1000); --schedule is both runs' --lr-schedule (constant,
# step, multistep, cosine). --runs powersgd redoes only the PowerSGD run of
# each seed (the table's allreduce column is then "-"), e.g. to finish a seed
# whose run was cut off.
#
# Accuracy does not depend on the machine's load, so this may share the
# machine; each run is bounded by `timeout` (--timeout, default 3600 s).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build"
SEEDS="0 1 2"
EPOCHS=1
RANK=2
BATCH=64
LR=0.01
THREADS=1
OUT=/tmp/dtrain-powersgd-accuracy
TIMEOUT=3600
RUNS="allreduce powersgd"
START_ITER=10
SCHEDULE=constant
while (($#)); do
  case "$1" in
    --build) BUILD="$2" ;;
    --seeds) SEEDS="$2" ;;
    --epochs) EPOCHS="$2" ;;
    --rank) RANK="$2" ;;
    --batch-size) BATCH="$2" ;;
    --lr) LR="$2" ;;
    --threads) THREADS="$2" ;;
    --out) OUT="$2" ;;
    --timeout) TIMEOUT="$2" ;;
    --runs) RUNS="$2" ;;
    --start-iter) START_ITER="$2" ;;
    --schedule) SCHEDULE="$2" ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "powersgd_accuracy.sh: unknown option '$1' (see --help)" >&2
      exit 2
      ;;
  esac
  shift 2
done
for r in $RUNS; do
  [[ "$r" == allreduce || "$r" == powersgd ]] || {
    echo "powersgd_accuracy.sh: --runs takes allreduce and/or powersgd, not '$r'" >&2
    exit 2
  }
done
DTRAIN="$BUILD/dtrain"
[[ -x "$DTRAIN" ]] || {
  echo "powersgd_accuracy.sh: no $DTRAIN; build first (scripts/build.sh)" >&2
  exit 2
}
mkdir -p "$OUT"

# train NAME SEED FLAGS...: one 2-process run; prints the last epoch's test accuracy.
train() {
  local name="$1" seed="$2"
  shift 2
  local metrics="$OUT/$name.seed$seed.jsonl"
  rm -f "$metrics"
  timeout --kill-after=10 "$TIMEOUT" "$DTRAIN" run --nproc-per-node 2 -- "$DTRAIN" train \
    --model resnet18 --dataset fashion-mnist --epochs "$EPOCHS" --batch-size "$BATCH" \
    --lr "$LR" --lr-schedule "$SCHEDULE" --seed "$seed" --threads "$THREADS" --quiet \
    --metrics-file "$metrics" "$@" \
    >"$OUT/$name.seed$seed.log" 2>&1 || {
    echo "powersgd_accuracy.sh: $name seed $seed failed; see $OUT/$name.seed$seed.log" >&2
    echo "-"
    return 0
  }
  python3 -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("%.4f" % rows[-1]["test_acc"])' "$metrics"
}

{
  echo "ResNet-18, Fashion-MNIST (28 px), 2 processes x $THREADS thread(s), batch $BATCH per"
  echo "process, SGD lr $LR ($SCHEDULE), $EPOCHS epoch(s); PowerSGD rank $RANK from iteration"
  echo "$START_ITER;"
  echo "$("$DTRAIN" --version | head -1); $(date -u +%FT%TZ)"
  echo
  echo "| seed | allreduce test accuracy | PowerSGD rank $RANK | difference (points) |"
  echo "|---|---|---|---|"
} >"$OUT/report.md"
diffs=()
for seed in $SEEDS; do
  plain=- compressed=-
  [[ " $RUNS " == *" allreduce "* ]] && plain="$(train allreduce "$seed")"
  [[ " $RUNS " == *" powersgd "* ]] && compressed="$(train powersgd "$seed" --comm-hook powersgd \
    --powersgd-rank "$RANK" --powersgd-start-iter "$START_ITER")"
  d="-"
  if [[ "$plain" != - && "$compressed" != - ]]; then
    d="$(python3 -c "print('%+.2f' % (100 * ($compressed - $plain)))")"
    diffs+=("$d")
  fi
  echo "| $seed | $plain | $compressed | $d |" >>"$OUT/report.md"
  echo "seed $seed: allreduce $plain, PowerSGD rank $RANK $compressed ($d points)"
done
if ((${#diffs[@]})); then
  python3 - "${diffs[@]}" >>"$OUT/report.md" <<'PY'
import sys
d = [float(x) for x in sys.argv[1:]]
print(f"\nMean difference {sum(d) / len(d):+.2f} points; largest |difference| "
      f"{max(abs(x) for x in d):.2f} points over {len(d)} seed(s).")
PY
fi
cat "$OUT/report.md"
