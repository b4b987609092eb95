#!/usr/bin/env bash
# Issue 10's benchmark: dtrain's parameter server against allreduce (Gloo,
# DDP's collective) on the same shaped network, in one run.
#
#   bench/ps_vs_allreduce.sh [--models "resnet18 vgg16"] [--workers 2]
#       [--servers "1 2"] [--sweep "1K 64M 8"] [--iters 3] [--warmup 1] [--rate 1gbit]
#       [--train] [--train-steps 5] [--train-warmup 2] [--batch-size 8]
#       [--image-size 32] [--pslite-runs 3] [--pslite-workers 1]
#       [--build DIR] [--out DIR] [--timeout 600] [--keep-netns]
#
# Topology: one namespace per node, every node's veth "eth0" plugged into a
# bridge that lives in a namespace of its own, each link shaped to --rate in
# both directions (tbf on the node's eth0 and on its bridge port), like a
# switched 1 GbE network. W = --workers (2..8), S = the largest of --servers
# (each 1..8); node n is dtpsb<n> at 10.217.0.<n+1>:
#   nodes 0 .. W-1        workers (PS workers; allreduce ranks)
#   nodes W .. W+S-1      PS servers (one per node)
#   node  W+S             the PS scheduler;   dtpsbsw: the bridge
# e.g. the default (W 2, S 2): workers 10.217.0.1-2, servers .3-.4, scheduler .5.
# Only these addresses, only inside these namespaces; all removed on exit.
#
# Phases (each job's roles started explicitly, bounded by --timeout):
#   1. push-pull of each model's parameter tensors (one key each), PS with
#      S servers on their own nodes (`dtrain ps scheduler|server`, workers
#      `dtrain bench kvstore --model M` with DMLC_ROLE=worker), against one
#      flat allreduce of the same bytes between the two workers
#      (`dtrain run --rdzv-backend c10d` in each worker namespace,
#      `dtrain bench collective allreduce`); bytes on the wire per node.
#   2. the same for nccl-tests' size sweep (--sweep "MIN MAX FACTOR").
#   3. --train: training images/sec, `dtrain bench train --kvstore dist_sync`
#      under DMLC_* (needs a dtrain whose `bench train` takes --kvstore)
#      against `dtrain bench train` under `dtrain run` (DDP over Gloo).
#   4. with PSLITE_BENCH=/path/to/kv_app_benchmark_test (ps-lite's
#      tests/test_kv_app_benchmark.cc, built by you; see bench/README.md):
#      that program as the worker(s) against (a) its own scheduler and
#      server and (b) dtrain's, and `dtrain bench kvstore` with the same
#      value bytes.
# Results: OUT/results.jsonl, logs in OUT; a table at the end.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PY=/usr/bin/python3

MODELS="resnet18 vgg16"
WORKERS=2
SERVERS="1 2"
SWEEP="1K 64M 8"
ITERS=3
WARMUP=1
RATE=1gbit
TRAIN=0
TRAIN_STEPS=5
TRAIN_WARMUP=2
BATCH=8
IMAGE=32
PSLITE_RUNS=3
PSLITE_WORKERS=1
BUILD=$ROOT/build
OUT=
TIMEOUT=600
KEEP_NETNS=0
PSLITE_BENCH=${PSLITE_BENCH:-}

usage() { sed -n '2,41p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [[ $# -gt 0 ]]; do
    case "$1" in
        --models) MODELS=$2; shift 2 ;;
        --workers) WORKERS=$2; shift 2 ;;
        --servers) SERVERS=$2; shift 2 ;;
        --sweep) SWEEP=$2; shift 2 ;;
        --iters) ITERS=$2; shift 2 ;;
        --warmup) WARMUP=$2; shift 2 ;;
        --rate) RATE=$2; shift 2 ;;
        --train) TRAIN=1; shift ;;
        --train-steps) TRAIN_STEPS=$2; shift 2 ;;
        --train-warmup) TRAIN_WARMUP=$2; shift 2 ;;
        --batch-size) BATCH=$2; shift 2 ;;
        --image-size) IMAGE=$2; shift 2 ;;
        --pslite-runs) PSLITE_RUNS=$2; shift 2 ;;
        --pslite-workers) PSLITE_WORKERS=$2; shift 2 ;;
        --build) BUILD=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --timeout) TIMEOUT=$2; shift 2 ;;
        --keep-netns) KEEP_NETNS=1; shift ;;
        -h|--help) usage 0 ;;
        *) echo "unknown argument: $1" >&2; usage 2 ;;
    esac
done
[[ $WORKERS =~ ^[2-8]$ ]] || { echo "--workers: 2 to 8 (one node each)" >&2; exit 2; }
SMAX=0
for s in $SERVERS; do
    [[ $s =~ ^[1-8]$ ]] || { echo "--servers: numbers from 1 to 8 (one node each; \"\": no PS jobs)" >&2; exit 2; }
    ((s > SMAX)) && SMAX=$s
done
[[ $PSLITE_WORKERS == 1 || $PSLITE_WORKERS == 2 ]] || { echo "--pslite-workers: 1 or 2" >&2; exit 2; }
read -r SWEEP_MIN SWEEP_MAX SWEEP_FACTOR <<<"$SWEEP"
if [[ -n $SWEEP && -z ${SWEEP_FACTOR:-} ]]; then
    echo "--sweep \"MIN MAX FACTOR\", e.g. \"1K 64M 8\" (empty string: no sweep)" >&2
    exit 2
fi
DTRAIN=$BUILD/dtrain
[[ -x $DTRAIN ]] || { echo "$DTRAIN not found; build it: cmake --build build --target dtrain" >&2; exit 1; }
"$DTRAIN" bench kvstore --help >/dev/null 2>&1 ||
    { echo "'$DTRAIN bench kvstore' is missing; rebuild dtrain from this tree" >&2; exit 1; }
if [[ -n $PSLITE_BENCH && ! -x $PSLITE_BENCH ]]; then
    echo "PSLITE_BENCH=$PSLITE_BENCH is not an executable (ps-lite's build/tests/kv_app_benchmark_test)" >&2
    exit 2
fi
OUT=${OUT:-$(mktemp -d /tmp/dtrain-ps-bench.XXXXXX)}
mkdir -p "$OUT"
RESULTS=$OUT/results.jsonl
: >"$RESULTS"

# --- namespaces --------------------------------------------------------------
P=dtpsb
SW=${P}sw
NODES=$((WORKERS + SMAX + 1))
addr() { echo "10.217.0.$(($1 + 1))"; }
ns() { echo "$P$1"; }
SERVER_NODE0=$WORKERS
SCHED_NODE=$((WORKERS + SMAX))

ns_exists() { ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$1"; }
ns_down() {
    local n pids
    for n in $(seq 0 $((NODES - 1))) sw; do
        ns_exists "$P$n" || continue
        pids=$(ip netns pids "$P$n" 2>/dev/null || true)
        # shellcheck disable=SC2086
        [[ -n $pids ]] && kill -9 $pids 2>/dev/null || true
        ip netns del "$P$n" 2>/dev/null || true
    done
}
ns_up() {
    local probe="${P}probe$$"
    if ! ip netns add "$probe" 2>/dev/null; then
        echo "SKIP: 'ip netns add' is not permitted here (needs root / CAP_SYS_ADMIN)" >&2
        exit 3
    fi
    ip netns del "$probe"
    ns_down
    NETNS_UP=1
    ip netns add "$SW"
    ip -n "$SW" link add dtbr type bridge
    ip -n "$SW" link set dtbr up
    local i
    for i in $(seq 0 $((NODES - 1))); do
        ip netns add "$(ns "$i")"
        ip -n "$(ns "$i")" link add eth0 type veth peer name "p$i" netns "$SW"
        ip -n "$SW" link set "p$i" master dtbr
        ip -n "$SW" link set "p$i" up
        ip -n "$(ns "$i")" addr add "$(addr "$i")/24" dev eth0
        ip -n "$(ns "$i")" link set eth0 up
        ip -n "$(ns "$i")" link set lo up
        # egress of the node (its uplink) and of its bridge port (its downlink)
        ip netns exec "$(ns "$i")" tc qdisc replace dev eth0 root tbf rate "$RATE" burst 256kb latency 20ms
        ip netns exec "$SW" tc qdisc replace dev "p$i" root tbf rate "$RATE" burst 256kb latency 20ms
    done
    for i in $(seq 1 $((NODES - 1))); do
        ip netns exec "$(ns 0)" ping -c1 -W1 "$(addr "$i")" >/dev/null 2>&1 || true
    done
    echo "namespaces up: $NODES nodes on 10.217.0.0/24, every link $RATE each way" >&2
}

# --- processes: each a `timeout` process-group leader, killed on exit ---------
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
    if [[ $NETNS_UP == 1 && $KEEP_NETNS == 0 ]]; then ns_down; fi
}
trap cleanup EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM

run_in() {  # NODE LOG CMD...  (in the background; LAST_PID)
    local node=$1 log=$2; shift 2
    timeout --kill-after=10 "$TIMEOUT" ip netns exec "$(ns "$node")" "$@" </dev/null >"$log" 2>&1 &
    PGIDS+=("$!")
    LAST_PID=$!
}
wait_all() {  # PIDS... -> WAIT_RC (first non-zero); a failing process stops the others
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
PORT=29600
# A new port per job (fresh namespaces: nothing else listens); not in a
# subshell, so that the count goes on.
next_port() { PORT=$((PORT + 1)); }

# Bytes every node's eth0 has sent and received: "tx0 rx0 tx1 rx1 ...".
counters() {
    local i out=""
    for i in $(seq 0 $((NODES - 1))); do
        out+="$(ip netns exec "$(ns "$i")" awk '$1 == "eth0:" {print $10, $2}' /proc/net/dev) "
    done
    echo "$out"
}

# record KEY=VALUE... [json=FILE]: one JSON line into RESULTS; json=FILE merges
# the last JSON object of FILE (rank 0's --json output).
record() {
    "$PY" - "$RESULTS" "$@" <<'EOF'
import json, sys
results, args = sys.argv[1], sys.argv[2:]
rec = {}
for a in args:
    k, v = a.split("=", 1)
    if k.startswith("json"):
        last = None
        for line in open(v, errors="replace"):
            i = line.find("{")
            if i >= 0:
                try:
                    o = json.loads(line[i:])
                    if isinstance(o, dict):
                        last = o
                except ValueError:
                    pass
        if last is not None:
            rec["result"] = last
        continue
    try:
        rec[k] = json.loads(v)
    except ValueError:
        rec[k] = v
with open(results, "a") as f:
    f.write(json.dumps(rec) + "\n")
EOF
}
# wire BEFORE AFTER: JSON list of [tx, rx] deltas per node
wire() {
    "$PY" -c 'import json,sys; b=list(map(int,sys.argv[1].split())); a=list(map(int,sys.argv[2].split()));
d=[x-y for x,y in zip(a,b)]; print(json.dumps([[d[2*i],d[2*i+1]] for i in range(len(d)//2)]))' "$1" "$2"
}

PS_ENV=(OMP_NUM_THREADS=1)
PS_TORCHRUN_ENV=0  # 1: workers also get torchrun's variables (training phase)
# ps_job TAG S WORKERS SCHED_CMD SERVER_CMD -- WORKER_CMD...: one PS job; WAIT_RC, WIRE
ps_job() {
    local tag=$1 s=$2 w=$3 sched=$4 server=$5; shift 6
    local port pids=() i before
    next_port; port=$PORT
    local env=(env "${PS_ENV[@]}" DMLC_PS_ROOT_URI="$(addr $SCHED_NODE)" DMLC_PS_ROOT_PORT="$port"
        DMLC_NUM_SERVER="$s" DMLC_NUM_WORKER="$w")
    before=$(counters)
    # shellcheck disable=SC2086
    run_in $SCHED_NODE "$OUT/$tag.scheduler.log" "${env[@]}" DMLC_ROLE=scheduler \
        DMLC_NODE_HOST="$(addr $SCHED_NODE)" $sched
    pids+=("$LAST_PID")
    for i in $(seq 0 $((s - 1))); do
        # shellcheck disable=SC2086
        run_in $((SERVER_NODE0 + i)) "$OUT/$tag.server$i.log" "${env[@]}" DMLC_ROLE=server \
            DMLC_NODE_HOST="$(addr $((SERVER_NODE0 + i)))" $server
        pids+=("$LAST_PID")
    done
    local torchrun=() mport
    if [[ $PS_TORCHRUN_ENV == 1 ]]; then
        # what `dtrain run --ps-servers` also gives its workers (a c10d group
        # beside the kvstore: bench train reports the total over workers)
        next_port; mport=$PORT
        torchrun=(WORLD_SIZE="$w" MASTER_ADDR="$(addr 0)" MASTER_PORT="$mport" LOCAL_RANK=0
            LOCAL_WORLD_SIZE=1 GLOO_SOCKET_IFNAME=eth0)
    fi
    for i in $(seq 0 $((w - 1))); do
        local rank=()
        [[ $PS_TORCHRUN_ENV == 1 ]] && rank=(RANK="$i")
        run_in "$i" "$OUT/$tag.worker$i.log" "${env[@]}" "${torchrun[@]}" "${rank[@]}" DMLC_ROLE=worker \
            DMLC_WORKER_ID="$i" DMLC_NODE_HOST="$(addr "$i")" "$@"
        pids+=("$LAST_PID")
    done
    wait_all "${pids[@]}"
    WIRE=$(wire "$before" "$(counters)")
    if [[ $WAIT_RC != 0 ]]; then
        echo "FAILED ($WAIT_RC): $tag; logs $OUT/$tag.*.log" >&2
        tail -n 5 "$OUT/$tag".*.log >&2 || true
    fi
}
# Rendezvous heartbeats ride the same saturated 1 Gbit/s links as Gloo's
# bulk traffic; with the default 3 missed 5-s beats, a 553 MB allreduce on this
# loaded machine made the agents see the membership change and restart the
# round again and again. 24 missed beats (2 min) keep one round.
RDZV_CONF="heartbeat_interval=5,missed_heartbeats=24"
# ar_job TAG CMD...: CMD on the W workers under `dtrain run` (c10d rendezvous on worker 0)
ar_job() {
    local tag=$1; shift
    local port pids=() i before
    next_port; port=$PORT
    before=$(counters)
    for i in $(seq $((WORKERS - 1)) -1 0); do
        run_in "$i" "$OUT/$tag.node$i.log" env OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=eth0 \
            "$DTRAIN" run --nnodes "$WORKERS" --nproc-per-node 1 --rdzv-backend c10d \
            --rdzv-endpoint "$(addr 0):$port" --rdzv-id "$tag" --rdzv-conf "$RDZV_CONF" -- "$@"
        pids+=("$LAST_PID")
    done
    wait_all "${pids[@]}"
    WIRE=$(wire "$before" "$(counters)")
    if [[ $WAIT_RC != 0 ]]; then
        echo "FAILED ($WAIT_RC): $tag; logs $OUT/$tag.*.log" >&2
        tail -n 5 "$OUT/$tag".*.log >&2 || true
    fi
}

# node_logs KEY TAG: KEY=OUT/TAG.node0.log KEY1=... for every worker (rank 0
# of `dtrain run` may be on any node), into NODE_LOGS
node_logs() {
    local i
    NODE_LOGS=("$1=$OUT/$2.node0.log")
    for i in $(seq 1 $((WORKERS - 1))); do NODE_LOGS+=("$1$i=$OUT/$2.node$i.log"); done
}

model_bytes() {  # MODEL -> fp32 bytes of its parameters (1000 classes)
    "$DTRAIN" models 2>/dev/null | awk -v m="$1" '$1 == m {gsub(",", "", $2); print $2 * 4}'
}

DTRAIN_PS=("$DTRAIN" ps)
KV=("$DTRAIN" bench kvstore -n "$ITERS" -w "$WARMUP" --interface eth0 --json)

echo "load before: $(uptime)" >&2
ns_up

# bandwidth check: worker 0 -> server 0 (worker 1 with no servers), 2 s
next_port; port=$PORT
CHECK_NODE=$SERVER_NODE0
((SMAX == 0)) && CHECK_NODE=1
run_in "$CHECK_NODE" "$OUT/verify.recv.log" "$PY" -c '
import socket, sys, time
s = socket.socket(); s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1)
c, _ = s.accept(); buf = bytearray(1 << 20); n = 0; t0 = None
while True:
    k = c.recv_into(buf)
    if not k: break
    if t0 is None: t0 = time.perf_counter()
    n += k
print(f"{n * 8 / (time.perf_counter() - t0) / 1e9:.3f}")' "$(addr "$CHECK_NODE")" "$port"
rpid=$LAST_PID
sleep 0.5
run_in 0 "$OUT/verify.send.log" "$PY" -c '
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
d = b"\0" * (1 << 20); end = time.perf_counter() + 2
while time.perf_counter() < end: s.sendall(d)
s.close()' "$(addr "$CHECK_NODE")" "$port"
wait_all "$LAST_PID" "$rpid"
LINK_GBPS=$(cat "$OUT/verify.recv.log" 2>/dev/null || echo "?")
echo "link check: $LINK_GBPS Gbit/s (worker 0 -> node $CHECK_NODE)" >&2
record phase=link gbps="$LINK_GBPS" rate="$RATE" workers="$WORKERS"

# 1. models' parameter sizes
for model in $MODELS; do
    bytes=$(model_bytes "$model")
    [[ -n $bytes ]] || { echo "unknown model $model (see '$DTRAIN models')" >&2; exit 2; }
    for s in $SERVERS; do
        tag=kv.$model.s$s
        echo "== $tag: PS, $WORKERS workers, $s server(s): ${KV[*]} --model $model" >&2
        ps_job "$tag" "$s" "$WORKERS" "${DTRAIN_PS[*]} scheduler" "${DTRAIN_PS[*]} server" -- "${KV[@]}" --model "$model"
        record phase=model model="$model" impl=ps servers="$s" workers="$WORKERS" rc="$WAIT_RC" \
            wire="$WIRE" json="$OUT/$tag.worker0.log"
    done
    tag=ar.$model
    # bench collective's check holds about 16 bytes per element in double
    # precision per rank (9 GB for VGG-16's 553 MB: the OOM killer ended it
    # here); above 256 MiB the allreduce is timed unchecked (PS is checked).
    check=1
    ((bytes > 268435456)) && check=0
    echo "== $tag: allreduce of $bytes bytes between the $WORKERS workers (check $check)" >&2
    ar_job "$tag" "$DTRAIN" bench collective allreduce -b "$bytes" -e "$bytes" -n "$ITERS" -w "$WARMUP" -c "$check"
    node_logs log "$tag"
    record phase=model model="$model" impl=allreduce bytes="$bytes" workers="$WORKERS" rc="$WAIT_RC" \
        wire="$WIRE" ops=$((2 * (ITERS + WARMUP + check))) "${NODE_LOGS[@]}"
done

# 2. size sweep
if [[ -n $SWEEP ]]; then
    for s in $SERVERS; do
        tag=kv.sweep.s$s
        echo "== $tag: PS sweep $SWEEP, $s server(s)" >&2
        ps_job "$tag" "$s" "$WORKERS" "${DTRAIN_PS[*]} scheduler" "${DTRAIN_PS[*]} server" -- "${KV[@]}" \
            -b "$SWEEP_MIN" -e "$SWEEP_MAX" -f "$SWEEP_FACTOR"
        record phase=sweep impl=ps servers="$s" workers="$WORKERS" rc="$WAIT_RC" wire="$WIRE" json="$OUT/$tag.worker0.log"
    done
    tag=ar.sweep
    echo "== $tag: allreduce sweep $SWEEP" >&2
    ar_job "$tag" "$DTRAIN" bench collective allreduce -b "$SWEEP_MIN" -e "$SWEEP_MAX" -f "$SWEEP_FACTOR" \
        -n "$ITERS" -w "$WARMUP" -c 1
    node_logs log "$tag"
    record phase=sweep impl=allreduce workers="$WORKERS" rc="$WAIT_RC" wire="$WIRE" "${NODE_LOGS[@]}"
fi

# 3. training images/sec
if [[ $TRAIN == 1 ]]; then
    TRAIN_FLAGS=(--batch-size "$BATCH" --image-size "$IMAGE" --steps "$TRAIN_STEPS"
        --warmup-steps "$TRAIN_WARMUP" --display-every "$TRAIN_STEPS" --threads 1 --json)
    HAVE_KV_TRAIN=0
    "$DTRAIN" bench train --help 2>&1 | grep -q -- '--kvstore' && HAVE_KV_TRAIN=1
    [[ $HAVE_KV_TRAIN == 1 ]] || echo "NOTE: '$DTRAIN bench train' has no --kvstore: PS training rows skipped" >&2
    PS_TORCHRUN_ENV=1
    for model in $MODELS; do
        if [[ $HAVE_KV_TRAIN == 1 ]]; then
            for s in $SERVERS; do
                tag=train.$model.s$s
                echo "== $tag: dtrain bench train --kvstore dist_sync, $WORKERS workers, $s server(s)" >&2
                ps_job "$tag" "$s" "$WORKERS" "${DTRAIN_PS[*]} scheduler" "${DTRAIN_PS[*]} server" -- \
                    "$DTRAIN" bench train --model "$model" --kvstore dist_sync "${TRAIN_FLAGS[@]}"
                record phase=train model="$model" impl=ps servers="$s" workers="$WORKERS" rc="$WAIT_RC" wire="$WIRE" \
                    json="$OUT/$tag.worker0.log"
            done
        fi
        tag=train.$model.ar
        echo "== $tag: dtrain bench train (DDP, Gloo) under dtrain run, $WORKERS nodes" >&2
        ar_job "$tag" "$DTRAIN" bench train --model "$model" "${TRAIN_FLAGS[@]}"
        node_logs json "$tag"
        record phase=train model="$model" impl=allreduce workers="$WORKERS" rc="$WAIT_RC" wire="$WIRE" \
            "${NODE_LOGS[@]}"
    done
    PS_TORCHRUN_ENV=0
fi

# 4. ps-lite's benchmark program against its own and dtrain's scheduler and server
if [[ -n $PSLITE_BENCH ]]; then
    for run in $(seq 1 "$PSLITE_RUNS"); do
        for impl in pslite dtrain; do
            tag=pslite.$impl.$run
            if [[ $impl == pslite ]]; then sched=$PSLITE_BENCH server=$PSLITE_BENCH
            else sched="${DTRAIN_PS[*]} scheduler" server="${DTRAIN_PS[*]} server"; fi
            echo "== $tag: $PSLITE_BENCH worker(s) x$PSLITE_WORKERS, scheduler+server: $impl" >&2
            ps_job "$tag" 1 "$PSLITE_WORKERS" "$sched" "$server" -- "$PSLITE_BENCH"
            record phase=pslite impl="$impl" run="$run" rc="$WAIT_RC" wire="$WIRE" log="$OUT/$tag.worker0.log"
        done
    done
    # dtrain's own client and server, the same 10,000,000 float values in one key
    tag=pslite.kvstore
    echo "== $tag: dtrain bench kvstore, 40,000,000 bytes, $PSLITE_WORKERS worker(s), 1 server" >&2
    ps_job "$tag" 1 "$PSLITE_WORKERS" "${DTRAIN_PS[*]} scheduler" "${DTRAIN_PS[*]} server" -- \
        "$DTRAIN" bench kvstore -n "$PSLITE_RUNS" -w 1 --interface eth0 --json -b 40000000 -e 40000000
    record phase=pslite impl=dtrain-kvstore rc="$WAIT_RC" wire="$WIRE" json="$OUT/$tag.worker0.log"
fi
echo "load after:  $(uptime)" >&2

"$PY" "$HERE/ps_vs_allreduce_report.py" "$RESULTS"
