#!/usr/bin/env bash
# Issue 22 (3): dtrain against PyTorch DDP of the same version on the CPU, the
# three workloads in one run, each side by side, rounds alternating which side
# goes first, medians and the ratio:
#   demo             the demo recipe, `dtrain run --nproc-per-node 2 -- dtrain
#                    train --model cnn --dataset fashion-mnist` (batch 64, 1
#                    thread) vs bench/peer/pytorch_ddp_train.py (train_vs_pytorch.sh)
#   resnet50, efficientnet_b0
#                    `dtrain bench train` on synthetic data vs
#                    bench/peer/pytorch_train_bench.py (train_vs_pytorch.sh --synthetic)
#
#   bench/parity_vs_pytorch.sh [--rounds 3] [--demo-epochs 2] [--image-size 112]
#       [--batch-size 16] [--steps 10] [--warmup-steps 2]
#       [--workloads "demo resnet50 efficientnet_b0"] [--build DIR] [--out DIR]
#
# The peer is the PyTorch of dtrain's LibTorch version (bench/peer_python.sh;
# DTRAIN_PEER_PYTHON overrides). Ends with a Markdown table for
# docs/benchmarks.md: per workload both medians with each round's figure, the
# ratio, the 1-minute load before each run, and the date, commit, machine and
# both versions. Each workload's logs and summary.json stay under --out.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
ROUNDS=3 EPOCHS=2 IMAGE=112 BATCH=16 STEPS=10 WARMUP=2 BUILD=$ROOT/build OUT=
WORKLOADS="demo resnet50 efficientnet_b0"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
while [[ $# -gt 0 ]]; do
    case "$1" in
        --rounds) ROUNDS=$2; shift 2 ;;
        --demo-epochs) EPOCHS=$2; shift 2 ;;
        --image-size) IMAGE=$2; shift 2 ;;
        --batch-size) BATCH=$2; shift 2 ;;
        --steps) STEPS=$2; shift 2 ;;
        --warmup-steps) WARMUP=$2; shift 2 ;;
        --workloads) WORKLOADS=$2; shift 2 ;;
        --build) BUILD=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h|--help) usage 0 ;;
        *) echo "unknown argument: $1" >&2; usage 2 ;;
    esac
done
for w in $WORKLOADS; do
    [[ $w == demo || $w == resnet50 || $w == efficientnet_b0 ]] ||
        { echo "unknown workload $w (demo, resnet50, efficientnet_b0)" >&2; exit 2; }
done
[[ -x $BUILD/dtrain ]] || { echo "$BUILD/dtrain not built (ninja -C $BUILD dtrain)" >&2; exit 1; }
OUT=${OUT:-$(mktemp -d /tmp/dtrain-parity.XXXXXX)}
mkdir -p "$OUT"
START=$(date -u '+%Y-%m-%d %H:%M UTC')

for w in $WORKLOADS; do
    echo "=== $w ($(uptime | sed 's/.*load average: /load /'))" >&2
    if [[ $w == demo ]]; then
        "$HERE/train_vs_pytorch.sh" --epochs "$EPOCHS" --rounds "$ROUNDS" --build "$BUILD" --out "$OUT/$w"
    else
        "$HERE/train_synthetic_vs_pytorch.sh" --model "$w" --image-size "$IMAGE" --batch-size "$BATCH" \
            --nproc 2 --threads 1 --steps "$STEPS" --warmup-steps "$WARMUP" --rounds "$ROUNDS" \
            --build "$BUILD" --out "$OUT/$w"
    fi
done

commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$ROOT" diff --quiet HEAD 2>/dev/null || commit="$commit (with local changes)"
cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)
python3 - "$OUT" "$START" "$commit" "$(nproc) cores, ${cpu:-unknown CPU}" "$EPOCHS" "$IMAGE" "$BATCH" \
    "$STEPS" "$WARMUP" $WORKLOADS <<'EOF'
import json, os, statistics, sys
out, start, commit, machine, epochs, image, batch, steps, warmup = sys.argv[1:10]
workloads = sys.argv[10:]

def loads(d):
    res = {"dtrain": [], "pytorch": []}
    for line in open(os.path.join(d, "load.txt")):
        name, _, rest = line.split(None, 2)
        res["dtrain" if name == "dtrain" else "pytorch"].append(float(rest.split(",")[0]))
    return res

versions = ""
print()
print(f"| workload | dtrain images/s, median (rounds) | PyTorch images/s, median (rounds) "
      f"| dtrain/PyTorch | load before each run (dtrain; PyTorch) |")
print("|---|---|---|---|---|")
for w in workloads:
    d = os.path.join(out, w)
    s = json.load(open(os.path.join(d, "summary.json")))
    if w == "demo":
        ips = {k: [r["ips"] for r in s["rounds"].get(k, [])] for k in ("dtrain", "pytorch")}
        label = f"demo: Fashion-MNIST CNN, 2 × 1 thread, batch 64, epoch 2..{epochs}"
        versions = s["versions"]
    else:
        ips = {k: [r["images_per_sec"] for r in s[k]] for k in ("dtrain", "pytorch")}
        label = f"{w} {image} px, synthetic, 2 × 1 thread, batch {batch}, {steps} + {warmup} warm-up steps"
        versions = versions or open(os.path.join(d, "versions.txt")).read().strip()
    med = {k: statistics.median(v) for k, v in ips.items()}
    ld = loads(d)
    cell = lambda k: f"{med[k]:.1f} ({', '.join(f'{x:.1f}' for x in ips[k])})"
    print(f"| {label} | {cell('dtrain')} | {cell('pytorch')} | {med['dtrain'] / med['pytorch']:.3f} "
          f"| {', '.join(f'{x:.1f}' for x in ld['dtrain'])}; {', '.join(f'{x:.1f}' for x in ld['pytorch'])} |")
print()
print(f"{start}, commit {commit}, {machine}; {versions}")
print(f"(logs and summary.json per workload: {out})")
EOF
