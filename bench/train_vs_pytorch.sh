#!/usr/bin/env bash
# Issue 2's benchmark: the dtrain demo vs the PyTorch DDP peer, one after the
# other on this machine, same CNN, Fashion-MNIST, 64 images per process,
# 2 processes x 1 thread, Gloo. Each run is timed wall-clock including start-up.
#
#   bench/train_vs_pytorch.sh [--epochs E] [--rounds R] [--build DIR] [--data-dir DIR]
#                             [--out DIR] [--timeout SECS] [--only dtrain|peer]
#
# Prints a table: images/sec (mean of the epochs after the first), final test
# accuracy, total wall time, and dtrain/peer ratios, each the median over R
# rounds (default 1) that alternate which side goes first, so both see the same
# machine load (each run's `uptime` load is printed beside its figure). Logs and
# the per-epoch metrics (JSON lines) are kept in --out (default: a new directory
# in /tmp), the medians and rounds also in summary.json. The peer is the
# PyTorch with dtrain's LibTorch version (bench/peer_python.sh;
# DTRAIN_PEER_PYTHON overrides); both versions are printed.
#
#   bench/train_vs_pytorch.sh --synthetic [--model M --image-size S ...]
#
# runs issue 9's synthetic-data benchmark instead: `dtrain bench train` beside
# the PyTorch eager peer with the ratio (bench/train_synthetic_vs_pytorch.sh,
# whose options follow --synthetic).
set -euo pipefail

if [[ ${1:-} == --synthetic ]]; then
    shift
    exec "$(dirname "${BASH_SOURCE[0]}")/train_synthetic_vs_pytorch.sh" "$@"
fi

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=bench/peer_python.sh
source "$HERE/peer_python.sh"

EPOCHS=3
ROUNDS=1
BUILD=$ROOT/build
DATA_DIR=/usr/share/datasets/fashion-mnist
OUT=
TIMEOUT=
ONLY=
NPROC=2
BATCH=64
THREADS=1

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
while [[ $# -gt 0 ]]; do
    case "$1" in
        --epochs) EPOCHS=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --build) BUILD=$2; shift 2 ;;
        --data-dir) DATA_DIR=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --timeout) TIMEOUT=$2; shift 2 ;;
        --only) ONLY=$2; shift 2 ;;
        -h|--help) usage 0 ;;
        *) echo "unknown argument: $1" >&2; usage 2 ;;
    esac
done
[[ $EPOCHS =~ ^[1-9][0-9]*$ ]] || { echo "--epochs must be a positive integer" >&2; exit 2; }
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "--rounds must be a positive integer" >&2; exit 2; }
[[ -z $ONLY || $ONLY == dtrain || $ONLY == peer ]] || { echo "--only dtrain|peer" >&2; exit 2; }
TIMEOUT=${TIMEOUT:-$((300 + 400 * EPOCHS))}   # per run, seconds
DTRAIN=$BUILD/dtrain
if [[ -x $DTRAIN ]]; then
    peer_select "$DTRAIN" || exit 1
else
    peer_select /bin/false || exit 1   # no dtrain: the peer alone, by DTRAIN_PEER_PYTHON or 1.13
fi
PY=$PEER_PY
[[ -d $DATA_DIR ]] || { echo "data directory $DATA_DIR missing (apt package fashion-mnist)" >&2; exit 1; }
OUT=${OUT:-$(mktemp -d /tmp/dtrain-train-bench.XXXXXX)}
mkdir -p "$OUT"

# --- process bookkeeping: every run is a `timeout` process-group leader -----
PGIDS=()
cleanup() {
    local pg
    for pg in "${PGIDS[@]:-}"; do
        [[ -n $pg ]] && kill -TERM -- "-$pg" 2>/dev/null || true
    done
    sleep 0.3
    for pg in "${PGIDS[@]:-}"; do
        [[ -n $pg ]] && kill -KILL -- "-$pg" 2>/dev/null || true
    done
}
trap cleanup EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM

free_port() {
    "${PEER_ENV[@]}" "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
now() { date +%s.%N; }
# run_bg LOG CMD...: start CMD under timeout in its own process group
run_bg() {
    local log=$1; shift
    timeout --kill-after=10 "$TIMEOUT" "$@" </dev/null >"$log" 2>&1 &
    PGIDS+=("$!")
    LAST_PID=$!
}

DTRAIN_RC=skip
DTRAIN_WALL=
run_dtrain() {
    if [[ ! -x $DTRAIN ]]; then
        echo "== dtrain: $DTRAIN not built; skipped" >&2
        return 0
    fi
    local port extra=()
    port=$(free_port)
    # pass a free port if `dtrain run` takes one (torchrun spells it both ways)
    if "$DTRAIN" run --help 2>&1 | grep -q -- '--master-port'; then
        extra=(--master-port "$port")
    elif "$DTRAIN" run --help 2>&1 | grep -q -- '--master_port'; then
        extra=(--master_port "$port")
    fi
    local cmd=("$DTRAIN" run --nproc-per-node "$NPROC" "${extra[@]}" --
        "$DTRAIN" train --model cnn --dataset fashion-mnist --data-dir "$DATA_DIR"
        --epochs "$EPOCHS" --batch-size "$BATCH" --lr 0.01 --momentum 0.9
        --weight-decay 0 --seed 0 --threads "$THREADS"
        --metrics-file "$OUT/dtrain.round$ROUND.jsonl")
    echo "== round $ROUND dtrain: ${cmd[*]}" >&2
    echo "   load before: $(uptime | sed 's/.*load average: //')" >&2
    echo "dtrain $ROUND $(uptime | sed 's/.*load average: //')" >>"$OUT/load.txt"
    rm -f "$OUT/dtrain.round$ROUND.jsonl"
    local t0 t1
    t0=$(now)
    run_bg "$OUT/dtrain.round$ROUND.log" env OMP_NUM_THREADS="$THREADS" "${cmd[@]}"
    set +e; wait "$LAST_PID"; DTRAIN_RC=$?; set -e
    t1=$(now)
    PGIDS=()
    DTRAIN_WALL=$(awk "BEGIN { printf \"%.3f\", $t1 - $t0 }")
    echo "dtrain $ROUND $DTRAIN_RC $DTRAIN_WALL" >>"$OUT/runs.txt"
    echo "   rc=$DTRAIN_RC wall=${DTRAIN_WALL}s log=$OUT/dtrain.round$ROUND.log" >&2
    [[ $DTRAIN_RC == 0 ]] || tail -n 20 "$OUT/dtrain.round$ROUND.log" >&2
}

PEER_RC=skip
PEER_WALL=
run_peer() {
    local port r pids=() rc=0
    port=$(free_port)
    echo "== round $ROUND peer: $NPROC x $PY bench/peer/pytorch_ddp_train.py --epochs $EPOCHS --threads $THREADS (Gloo, MASTER_PORT=$port)" >&2
    echo "   load before: $(uptime | sed 's/.*load average: //')" >&2
    echo "peer $ROUND $(uptime | sed 's/.*load average: //')" >>"$OUT/load.txt"
    rm -f "$OUT/peer.round$ROUND.jsonl"
    local t0 t1
    t0=$(now)
    for ((r = NPROC - 1; r >= 0; r--)); do
        local margs=()
        [[ $r == 0 ]] && margs=(--metrics-file "$OUT/peer.round$ROUND.jsonl")
        run_bg "$OUT/peer.round$ROUND.rank$r.log" env "${PEER_ENV[@]:1}" MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" \
            WORLD_SIZE="$NPROC" RANK="$r" LOCAL_RANK="$r" LOCAL_WORLD_SIZE="$NPROC" \
            OMP_NUM_THREADS="$THREADS" \
            "$PY" "$HERE/peer/pytorch_ddp_train.py" --data-dir "$DATA_DIR" \
            --epochs "$EPOCHS" --batch-size "$BATCH" --lr 0.01 --momentum 0.9 \
            --weight-decay 0 --seed 0 --threads "$THREADS" "${margs[@]}"
        pids+=("$LAST_PID")
    done
    # wait for both ranks; if one fails, stop the other instead of letting it
    # wait for its peer until the timeout
    local p c done_pid rest
    while ((${#pids[@]})); do
        set +e; wait -n -p done_pid "${pids[@]}"; c=$?; set -e
        [[ -n ${done_pid:-} ]] || break
        rest=()
        for p in "${pids[@]}"; do [[ $p == "$done_pid" ]] || rest+=("$p"); done
        pids=("${rest[@]}")
        if [[ $c != 0 && $rc == 0 ]]; then
            rc=$c
            for p in "${pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null || true; done
        fi
    done
    t1=$(now)
    PGIDS=()
    PEER_RC=$rc
    PEER_WALL=$(awk "BEGIN { printf \"%.3f\", $t1 - $t0 }")
    echo "peer $ROUND $PEER_RC $PEER_WALL" >>"$OUT/runs.txt"
    echo "   rc=$PEER_RC wall=${PEER_WALL}s logs=$OUT/peer.round$ROUND.rank*.log" >&2
    [[ $PEER_RC == 0 ]] || tail -n 20 "$OUT/peer.round$ROUND.rank0.log" >&2
}

peer_versions | tee "$OUT/versions.txt" >&2
rm -f "$OUT/runs.txt" "$OUT/load.txt"
echo "load before: $(uptime)" >&2
for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
    order=(dtrain peer); ((ROUND % 2 == 0)) && order=(peer dtrain)
    for impl in "${order[@]}"; do
        [[ $ONLY == "" || $ONLY == "$impl" ]] || continue
        if [[ $impl == dtrain && ! -x $DTRAIN ]]; then
            echo "== dtrain: $DTRAIN not built; skipped" >&2
            continue
        fi
        "run_$impl"
    done
done
echo "load after:  $(uptime)" >&2

"${PEER_ENV[@]}" "$PY" - "$OUT" "$EPOCHS" "$ROUNDS" <<'EOF'
import json, math, os, statistics, sys
out, epochs, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
names = {"dtrain": "dtrain", "pytorch": "peer"}

def load(path):
    recs = []
    if os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if line.startswith("{"):
                try:
                    recs.append(json.loads(line))
                except ValueError:
                    pass
    return recs

runs = {}   # (impl, round) -> (rc, wall)
if os.path.exists(os.path.join(out, "runs.txt")):
    for line in open(os.path.join(out, "runs.txt")):
        name, r, rc, wall = line.split()
        impl = "dtrain" if name == "dtrain" else "pytorch"
        runs[(impl, int(r))] = (rc, float(wall))
loads = {}  # (impl, round) -> 1-minute load average before the run
if os.path.exists(os.path.join(out, "load.txt")):
    for line in open(os.path.join(out, "load.txt")):
        name, r, rest = line.split(None, 2)
        impl = "dtrain" if name == "dtrain" else "pytorch"
        loads[(impl, int(r))] = float(rest.split(",")[0])

def nan_median(xs):
    xs = [x for x in xs if not math.isnan(x)]
    return statistics.median(xs) if xs else math.nan

per_round = {}  # impl -> list of row dicts
problems = []
for impl, name in names.items():
    for r in range(1, rounds + 1):
        if (impl, r) not in runs:
            continue
        rc, wall = runs[(impl, r)]
        recs = load(os.path.join(out, f"{name}.round{r}.jsonl"))
        later = recs[1:] if len(recs) > 1 else recs
        ips = sum(x["images_per_sec"] for x in later) / len(later) if later else math.nan
        row = dict(ips=ips, acc=recs[-1]["test_acc"] if recs else math.nan,
                   loss=recs[-1]["train_loss"] if recs else math.nan,
                   eps=sum(x["epoch_seconds"] for x in recs) / len(recs) if recs else math.nan,
                   wall=wall, load=loads.get((impl, r), math.nan))
        per_round.setdefault(impl, []).append(row)
        if rc != "0" or len(recs) != epochs:
            problems.append(f"WARNING: {impl} round {r}: exit status {rc}, {len(recs)}/{epochs} epochs in metrics")
rows = {impl: {k: nan_median([x[k] for x in v]) for k in v[0]} for impl, v in per_round.items()}

def fmt(v, spec):
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)

def ratio(key):
    d, p = rows.get("dtrain"), rows.get("pytorch")
    if not d or not p:
        return "n/a"
    a, b = d[key], p[key]
    if any(isinstance(v, float) and math.isnan(v) for v in (a, b)) or b == 0:
        return "n/a"
    return f"{a / b:.3f}"

ep_label = f"epochs 2..{epochs}" if epochs > 1 else "epoch 1"
lines = [
    ("images/sec (" + ep_label + ", all ranks)", "ips", ".1f"),
    ("final test_acc", "acc", ".4f"),
    ("final train_loss", "loss", ".4f"),
    ("mean epoch_seconds", "eps", ".2f"),
    ("total wall time incl. start-up (s)", "wall", ".2f"),
]
print()
print(open(os.path.join(out, "versions.txt")).read().strip())
print(f"Fashion-MNIST CNN, 2 processes x 1 thread, batch 64/process, Gloo, {epochs} epoch(s), "
      f"median of {rounds} round(s)")
print(f"{'':40s} {'dtrain':>12s} {'pytorch':>12s} {'dtrain/peer':>12s}")
for label, key, spec in lines:
    d, p = rows.get("dtrain"), rows.get("pytorch")
    print(f"{label:40s} {fmt(d[key] if d else None, spec):>12s} "
          f"{fmt(p[key] if p else None, spec):>12s} {ratio(key):>12s}")
for impl in names:
    if impl in per_round:
        print(f"  {impl} per round: images/sec " + " ".join(fmt(x["ips"], ".1f") for x in per_round[impl])
              + "; load before " + " ".join(fmt(x["load"], ".2f") for x in per_round[impl]))
for line in problems:
    print(line)
json.dump({"medians": rows, "rounds": per_round, "epochs": epochs,
           "ratio": (rows["dtrain"]["ips"] / rows["pytorch"]["ips"]
                     if "dtrain" in rows and "pytorch" in rows and rows["pytorch"]["ips"] else None),
           "versions": open(os.path.join(out, "versions.txt")).read().strip(), "problems": problems},
          open(os.path.join(out, "summary.json"), "w"), indent=1)
print(f"(metrics and logs: {out}; summary.json)")
EOF
