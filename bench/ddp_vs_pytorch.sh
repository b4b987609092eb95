#!/usr/bin/env bash
# Issue 3's benchmark: DDP step time of `dtrain bench ddp` vs PyTorch DDP
# (bench/peer/pytorch_ddp_step.py), 2 processes, Gloo, synthetic data, for the
# demo CNN and ResNet-18 on small images,
#   (a) loopback: dtrain under `dtrain run`, the peer started with env vars;
#   (b) netns:    rank 0 in namespace dtrainbench0 (10.213.0.1), rank 1 in
#                 dtrainbench1 (10.213.0.2), joined by a veth pair shaped to
#                 1 Gbit/s with tc (bench/netns/netns.sh). Both dtrain and the
#                 peer are started with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT
#                 set by hand (rank 0 hosts the store).
#
#   bench/ddp_vs_pytorch.sh [--models "cnn resnet18"] [--modes "loopback netns"]
#       [--batch-size 64] [--image-size 32] [--steps 20] [--warmup 3]
#       [--threads 1] [--bucket-cap-mb 25] [--find-unused-parameters]
#       [--rate 1gbit] [--build DIR]
#       [--out DIR] [--timeout SECS] [--only dtrain|peer] [--keep-netns]
#
# Prints per-step time, images/sec, dtrain/peer throughput ratio and the
# fraction of communication hidden behind backward (method: bench/README.md).
# Without `dtrain bench ddp` in the build, runs the peer only.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=bench/peer_python.sh
source "$HERE/peer_python.sh"
NETNS=$HERE/netns/netns.sh
NS0=dtrainbench0 NS1=dtrainbench1 DEV0=dtb0 DEV1=dtb1 ADDR0=10.213.0.1

MODELS="cnn resnet18"
MODES="loopback netns"
BATCH=64
IMAGE=32
STEPS=20
WARMUP=3
THREADS=1
BUCKET=25
FIND_UNUSED=()
RATE=1gbit
BUILD=$ROOT/build
OUT=
TIMEOUT=600
ONLY=
KEEP_NETNS=0

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [[ $# -gt 0 ]]; do
    case "$1" in
        --models) MODELS=$2; shift 2 ;;
        --modes) MODES=$2; shift 2 ;;
        --batch-size) BATCH=$2; shift 2 ;;
        --image-size) IMAGE=$2; shift 2 ;;
        --steps) STEPS=$2; shift 2 ;;
        --warmup) WARMUP=$2; shift 2 ;;
        --threads) THREADS=$2; shift 2 ;;
        --bucket-cap-mb) BUCKET=$2; shift 2 ;;
        --find-unused-parameters) FIND_UNUSED=(--find-unused-parameters); shift ;;
        --rate) RATE=$2; shift 2 ;;
        --build) BUILD=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --timeout) TIMEOUT=$2; shift 2 ;;
        --only) ONLY=$2; shift 2 ;;
        --keep-netns) KEEP_NETNS=1; shift ;;
        -h|--help) usage 0 ;;
        *) echo "unknown argument: $1" >&2; usage 2 ;;
    esac
done
for m in $MODELS; do [[ $m == cnn || $m == resnet18 ]] || { echo "unknown model $m (cnn, resnet18)" >&2; exit 2; }; done
for m in $MODES; do [[ $m == loopback || $m == netns ]] || { echo "unknown mode $m (loopback, netns)" >&2; exit 2; }; done
[[ -z $ONLY || $ONLY == dtrain || $ONLY == peer ]] || { echo "--only dtrain|peer" >&2; exit 2; }
OUT=${OUT:-$(mktemp -d /tmp/dtrain-ddp-bench.XXXXXX)}
mkdir -p "$OUT"
RESULTS=$OUT/results.jsonl
: >"$RESULTS"
DTRAIN=$BUILD/dtrain
# the peer with dtrain's LibTorch version (DTRAIN_PEER_PYTHON overrides)
if [[ -x $DTRAIN ]]; then peer_select "$DTRAIN" || exit 1; else peer_select /bin/false || exit 1; fi
PY=$PEER_PY
peer_versions >&2

# --- process bookkeeping: every worker is a `timeout` process-group leader ---
PGIDS=()
NETNS_UP=0
kill_all() {
    local pg
    for pg in "${PGIDS[@]:-}"; do [[ -n $pg ]] && kill -TERM -- "-$pg" 2>/dev/null || true; done
    sleep 0.3
    for pg in "${PGIDS[@]:-}"; do [[ -n $pg ]] && kill -KILL -- "-$pg" 2>/dev/null || true; done
    PGIDS=()
}
cleanup() {
    kill_all
    if [[ $NETNS_UP == 1 && $KEEP_NETNS == 0 ]]; then "$NETNS" down >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM

free_port() {  # [namespace]
    local pre=()
    [[ -n ${1:-} ]] && pre=(ip netns exec "$1")
    "${pre[@]}" "${PEER_ENV[@]}" "$PY" -c 'import socket; s=socket.socket(); s.bind(("", 0)); print(s.getsockname()[1]); s.close()'
}
run_bg() {  # LOG CMD...
    local log=$1; shift
    timeout --kill-after=10 "$TIMEOUT" "$@" </dev/null >"$log" 2>&1 &
    PGIDS+=("$!")
    LAST_PID=$!
}
wait_all() {  # PIDS... -> WAIT_RC (first non-zero); a failing rank stops the others
    local left=("$@") done_pid c p rest
    WAIT_RC=0
    while ((${#left[@]})); do
        set +e; wait -n -p done_pid "${left[@]}"; c=$?; set -e
        [[ -n ${done_pid:-} ]] || break
        rest=()
        for p in "${left[@]}"; do [[ $p == "$done_pid" ]] || rest+=("$p"); done
        left=("${rest[@]}")
        if [[ $c != 0 && $WAIT_RC == 0 ]]; then
            WAIT_RC=$c
            for p in "${left[@]}"; do kill -TERM -- "-$p" 2>/dev/null || true; done
        fi
    done
    PGIDS=()
}

# --- is `dtrain bench ddp` there? which of the optional flags does it take? ---
HAVE_DTRAIN=0
DTRAIN_EXTRA=()
if [[ $ONLY != peer ]]; then
    if [[ -x $DTRAIN ]] && help=$(timeout 20 "$DTRAIN" bench ddp --help 2>&1); then
        HAVE_DTRAIN=1
        grep -q -- '--threads' <<<"$help" && DTRAIN_EXTRA+=(--threads "$THREADS")
        grep -q -- '--bucket-cap-mb' <<<"$help" && DTRAIN_EXTRA+=(--bucket-cap-mb "$BUCKET")
        if ((${#FIND_UNUSED[@]})); then
            grep -q -- '--find-unused-parameters' <<<"$help" ||
                { echo "'$DTRAIN bench ddp' has no --find-unused-parameters" >&2; exit 2; }
            DTRAIN_EXTRA+=("${FIND_UNUSED[@]}")
        fi
    else
        echo "NOTE: '$DTRAIN bench ddp' not available; running the PyTorch peer only" >&2
    fi
fi
RUN_PEER=1
[[ $ONLY == dtrain ]] && RUN_PEER=0

COMMON_ENV=(OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS")
set_cmds() {  # MODEL -> DCMD (dtrain worker), PCMD (peer worker)
    local image=$IMAGE
    [[ $1 == cnn ]] && image=28  # the demo CNN takes 1x28x28
    DCMD=("$DTRAIN" bench ddp --model "$1" --batch-size "$BATCH" --image-size "$image"
        --steps "$STEPS" --warmup "$WARMUP" --json "${DTRAIN_EXTRA[@]}")
    PCMD=("${PEER_ENV[@]}" "$PY" "$HERE/peer/pytorch_ddp_step.py" --model "$1" --batch-size "$BATCH"
        --image-size "$image" --steps "$STEPS" --warmup "$WARMUP"
        --threads "$THREADS" --bucket-cap-mb "$BUCKET" "${FIND_UNUSED[@]}")
}

# record MODE MODEL IMPL RC LOG: append rank 0's JSON result (tagged) to RESULTS
record() {
    "${PEER_ENV[@]}" "$PY" - "$@" "$RESULTS" <<'EOF'
import json, sys
mode, model, impl, rc, log, results = sys.argv[1:7]
rec = None
for line in open(log, errors="replace"):
    i = line.find("{")
    if i < 0:
        continue
    try:
        r = json.loads(line[i:])
    except ValueError:
        continue
    if isinstance(r, dict) and "step_ms" in r:
        rec = r  # the last one wins (rank 0 prints one)
if rec is None:
    rec = {"error": f"no JSON result with step_ms (exit status {rc})"}
rec.update({"mode": mode, "model_name": model, "impl_name": impl, "rc": int(rc), "log": log})
with open(results, "a") as f:
    f.write(json.dumps(rec) + "\n")
EOF
}

run_loopback() {  # MODEL
    local model=$1 port r pids log
    set_cmds "$model"
    if [[ $HAVE_DTRAIN == 1 ]]; then
        log=$OUT/loopback.$model.dtrain.log
        port=$(free_port)
        echo "== (load before $(cut -d' ' -f1 /proc/loadavg)) loopback $model dtrain: $DTRAIN run --nproc-per-node 2 --master-port $port -- ${DCMD[*]}" >&2
        run_bg "$log" env "${COMMON_ENV[@]}" "$DTRAIN" run --nproc-per-node 2 --master-port "$port" -- \
            "${DCMD[@]}"
        wait_all "$LAST_PID"
        record loopback "$model" dtrain "$WAIT_RC" "$log"
        [[ $WAIT_RC == 0 ]] || tail -n 15 "$log" >&2
    fi
    if [[ $RUN_PEER == 1 ]]; then
        port=$(free_port)
        echo "== (load before $(cut -d' ' -f1 /proc/loadavg)) loopback $model pytorch: 2 x ${PCMD[*]} (MASTER_PORT=$port)" >&2
        pids=()
        for r in 1 0; do
            run_bg "$OUT/loopback.$model.pytorch.rank$r.log" env "${COMMON_ENV[@]}" \
                MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" WORLD_SIZE=2 RANK=$r LOCAL_RANK=$r \
                "${PCMD[@]}"
            pids+=("$LAST_PID")
        done
        wait_all "${pids[@]}"
        log=$OUT/loopback.$model.pytorch.rank0.log
        record loopback "$model" pytorch "$WAIT_RC" "$log"
        [[ $WAIT_RC == 0 ]] || tail -n 15 "$log" "$OUT/loopback.$model.pytorch.rank1.log" >&2
    fi
}

# start_ns_pair IMPL MODEL PORT CMD...: rank 0 in NS0, rank 1 in NS1
start_ns_pair() {
    local impl=$1 model=$2 port=$3; shift 3
    local r ns dev
    NS_PIDS=()
    for r in 1 0; do
        if [[ $r == 0 ]]; then ns=$NS0 dev=$DEV0; else ns=$NS1 dev=$DEV1; fi
        run_bg "$OUT/netns.$model.$impl.rank$r.log" ip netns exec "$ns" env "${COMMON_ENV[@]}" \
            MASTER_ADDR=$ADDR0 MASTER_PORT="$port" WORLD_SIZE=2 RANK=$r LOCAL_RANK=0 \
            LOCAL_WORLD_SIZE=1 GLOO_SOCKET_IFNAME=$dev "$@"
        NS_PIDS+=("$LAST_PID")
    done
}

run_netns() {  # MODEL
    local model=$1 port log
    set_cmds "$model"
    if [[ $HAVE_DTRAIN == 1 ]]; then
        port=$(free_port "$NS0")
        echo "== (load before $(cut -d' ' -f1 /proc/loadavg)) netns $model dtrain: per namespace: RANK=r MASTER_ADDR=$ADDR0 MASTER_PORT=$port GLOO_SOCKET_IFNAME=dtb<r> ${DCMD[*]}" >&2
        start_ns_pair dtrain "$model" "$port" "${DCMD[@]}"
        wait_all "${NS_PIDS[@]}"
        log=$OUT/netns.$model.dtrain.rank0.log
        record netns "$model" dtrain "$WAIT_RC" "$log"
        [[ $WAIT_RC == 0 ]] || tail -n 15 "$log" "$OUT/netns.$model.dtrain.rank1.log" >&2
    fi
    if [[ $RUN_PEER == 1 ]]; then
        port=$(free_port "$NS0")
        echo "== (load before $(cut -d' ' -f1 /proc/loadavg)) netns $model pytorch: per namespace: RANK=r MASTER_ADDR=$ADDR0 MASTER_PORT=$port GLOO_SOCKET_IFNAME=dtb<r> ${PCMD[*]}" >&2
        start_ns_pair pytorch "$model" "$port" "${PCMD[@]}"
        wait_all "${NS_PIDS[@]}"
        log=$OUT/netns.$model.pytorch.rank0.log
        record netns "$model" pytorch "$WAIT_RC" "$log"
        [[ $WAIT_RC == 0 ]] || tail -n 15 "$log" "$OUT/netns.$model.pytorch.rank1.log" >&2
    fi
}

echo "load before: $(uptime)" >&2
for mode in $MODES; do
    if [[ $mode == netns ]]; then
        if ! "$NETNS" check 2>/dev/null; then
            echo "SKIP netns mode: 'ip netns add' is not permitted here (run as root)" >&2
            continue
        fi
        NETNS_UP=1
        DTRAINBENCH_RATE=$RATE "$NETNS" up >&2
        "$NETNS" verify 2 >&2 || echo "WARNING: bandwidth check failed" >&2
    fi
    for model in $MODELS; do
        "run_$mode" "$model"
    done
    if [[ $mode == netns && $KEEP_NETNS == 0 ]]; then
        "$NETNS" down >&2
        NETNS_UP=0
    fi
done
echo "load after:  $(uptime)" >&2

"${PEER_ENV[@]}" "$PY" - "$RESULTS" "$RATE" <<'EOF'
import json, math, sys
results, rate = sys.argv[1], sys.argv[2]
recs = [json.loads(l) for l in open(results) if l.strip()]
by = {(r["mode"], r["model_name"], r["impl_name"]): r for r in recs}

def g(r, k, spec):
    v = r.get(k) if r else None
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v * 100, ".0f") + "%" if k == "hidden_fraction" else format(v, spec)

cols = [("step_ms", "step ms", ".1f"), ("images_per_sec", "img/s", ".1f"),
        ("forward_ms", "fwd ms", ".1f"), ("backward_ms", "bwd ms", ".1f"),
        ("backward_compute_ms", "bwd cmp", ".1f"), ("step_nosync_ms", "nosync ms", ".1f"),
        ("comm_ms", "comm ms", ".1f"), ("exposed_comm_ms", "exposed", ".1f"),
        ("hidden_fraction", "hidden", "")]
print()
print("DDP step benchmark, 2 processes, Gloo; loopback = 127.0.0.1, "
      f"netns = two namespaces over veth shaped to {rate}")
hdr = f"{'mode':9s} {'model':9s} {'impl':8s}" + "".join(f" {h:>9s}" for _, h, _ in cols) + f" {'ratio':>7s}"
print(hdr)
print("-" * len(hdr))
seen = []
for r in recs:
    key = (r["mode"], r["model_name"])
    if key not in seen:
        seen.append(key)
for mode, model in seen:
    d, p = by.get((mode, model, "dtrain")), by.get((mode, model, "pytorch"))
    ratio = "-"
    if d and p and d.get("images_per_sec") and p.get("images_per_sec"):
        ratio = f"{d['images_per_sec'] / p['images_per_sec']:.3f}"
    for impl, r in (("dtrain", d), ("pytorch", p)):
        if r is None:
            continue
        line = f"{mode:9s} {model:9s} {impl:8s}" + "".join(f" {g(r, k, s):>9s}" for k, _, s in cols)
        line += f" {ratio if impl == 'dtrain' else '':>7s}"
        if "error" in r:
            line += "  ERROR: " + r["error"]
        print(line)
print("ratio = dtrain images/sec / pytorch images/sec; hidden = 1 - exposed/comm "
      "(exposed = median DDP step - median no_sync step)")
print(f"(results: {results})")
EOF
