#!/usr/bin/env bash
# Issue 19 (Measurements): what a worker failure costs, side by side on one
# machine, the same job for every case:
#
#   bench/recovery.sh [--steps 120] [--kill-step 60] [--checkpoint-every 25]
#       [--nproc 4] [--batch-size 8] [--image-size 32] [--threads 1]
#       [--rounds 1] [--cases "plain-nofault live-nofault live-kill
#        live-kill-noreplace restart-kill torchrun-kill live-stop"]
#       [--torchft PYTHONPATH] [--build DIR] [--out DIR]
#       [--timeout SECS] [--netns]
#
# The job: ResNet-18 (10 classes) on synthetic 3 x S x S images, --nproc
# workers on the CPU (--device cpu, also on a GPU machine; --threads intra-op
# threads each), --batch-size per worker, SGD (lr 0.05, momentum 0.9), one
# epoch of --steps steps; rank 0 prints a progress line after every committed
# step, each line stamped with its arrival time (bench/recovery_report.py
# stamp).
#
#   plain-nofault  dtrain run -- dtrain train (plain DDP, no checkpoints)
#   live-nofault   dtrain run --recovery live -- dtrain train
#   live-kill      as live-nofault, --max-restarts 1 (the dead worker is
#                  replaced and joins); rank 1 SIGKILLed after step --kill-step
#   live-kill-noreplace  the same with --max-restarts 0: no replacement starts
#                  (whose start-up shares the CPU with the redone step)
#   restart-kill   dtrain run --recovery restart --max-restarts 1 -- dtrain train
#                  --checkpoint-dir D --checkpoint-every C; rank 1 SIGKILLed
#   torchrun-kill  torchrun (the PyTorch 2.11 peer, bench/peer_python.sh)
#                  --max-restarts 3 -- bench/peer/recovery_worker.py --mode ddp
#                  (plain DDP, checkpoint every C steps, resumes from it; 3, not
#                  1: under load a restarted Gloo group sometimes fails to
#                  connect, and torchrun then restarts again)
#   live-stop      as live-nofault, --max-restarts 0; rank 1 SIGSTOPped after
#                  step --kill-step (SIGKILLed once the others finished)
#   torchft-kill   (with --torchft PYTHONPATH: folders holding torchft 0.2 and
#                  its opentelemetry dependencies, e.g. made by `PEER -m pip
#                  install --target D1 --no-deps torchft==0.2.*` and `PEER -m
#                  pip install --target D2 opentelemetry-api opentelemetry-sdk
#                  opentelemetry-exporter-otlp-proto-http`: --torchft D1:D2)
#                  torchft's lighthouse and --nproc replica groups of one
#                  process (recovery_worker.py --mode torchft), replica 1
#                  SIGKILLed and restarted once
#   live-cut       (--netns only) as live-nofault, --max-restarts 0; node 1's
#                  link is cut (its veth end set down) after step --kill-step
#
# --netns: two nodes of --nproc/2 workers in the network namespaces of
# bench/netns/netns.sh (root), joined by a link shaped to DTRAINBENCH_RATE
# (default 1gbit) each way, each node's launcher started in its own
# namespace (dtrain run / torchrun --nnodes 2, c10d rendezvous hosted by
# node 0 at 10.213.0.1, Gloo on the veth: GLOO_SOCKET_IFNAME). Node 0 starts
# first, so it is node rank 0 and holds ranks 0 and 1; the fault hits rank 1
# (or node 1's link). torchft-kill: node 0 runs the lighthouse and replicas
# 0 and 1, node 1 replicas 2 and 3 (--torchft-job below).
#
# Per fault case: the step time before the fault, the time from the fault to
# the next committed step (a step above the last one committed before it),
# that minus the step time (the issue's "beyond the time the redone step
# takes"), steps and samples redone, samples lost and, for dtrain live, whether
# the final weights equal the no-fault run's; per no-fault case steps/s and the
# ratio live / plain (recovery_report.py says how each is derived). Results as
# Markdown on stdout, per-case logs and results.jsonl in --out.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
REPORT=$HERE/recovery_report.py
PY=/usr/bin/python3  # the stamper and the report: standard library only

# Internal: recovery.sh --torchft-job PYTHONPATH NPROC PORT PEER_LD_LIBRARY_PATH
# PEER_PY NODE -- WORKER ARGS...: torchft's lighthouse on 127.0.0.1:PORT
# (--min_replicas NPROC-1, its other settings the defaults of the
# torchft_lighthouse command: a 60 s join timeout, where the Python binding's
# default of 100 ms forms each quorum without a replica that arrives later,
# which then heals and sits out every other step) and NPROC replica
# groups of one process; a replica that fails is started again once (as
# --max-restarts 1 would). Ends when every replica has ended. NODE is - on
# one host; with --netns, node NODE (0 or 1, run in its namespace) starts
# replicas [NODE*NPROC/2, (NODE+1)*NPROC/2) and node 0 the lighthouse, on
# 10.213.0.1:PORT. There each replica runs under the host name dtbnode<NODE>
# (a UTS namespace of its own), which netns.sh's hosts files resolve to that
# node's address in both namespaces: torchft advertises gethostname() to the
# others (its manager, its HTTP checkpoint transport), and c10d's Gloo binds
# to the address the host name resolves to.
if [[ ${1:-} == --torchft-job ]]; then
    export PYTHONPATH=$2 LD_LIBRARY_PATH=$5
    n=$3 port=$4 py=$6 node=$7
    shift 8
    host=127.0.0.1 first=0 last=$n wrap=()
    if [[ $node != - ]]; then
        host=10.213.0.1 first=$((node * n / 2)) last=$(((node + 1) * n / 2))
        # shellcheck disable=SC2016  # expanded by the inner sh
        wrap=(unshare --uts sh -c 'hostname "$0" && exec "$@"' "dtbnode$node")
    fi
    lighthouse=
    if [[ $node == - || $node == 0 ]]; then
        "$py" -c 'import sys, time
from torchft.coordination import LighthouseServer
# the defaults of the torchft_lighthouse command (the binding joins for 100 ms)
s = LighthouseServer(bind=sys.argv[1], min_replicas=int(sys.argv[2]),
                     join_timeout_ms=60000, quorum_tick_ms=100, heartbeat_timeout_ms=5000)
print("lighthouse at", s.address(), flush=True)
time.sleep(1e6)' "$host:$port" $((n - 1)) > >(sed -u '') 2> >(sed -u '' >&2) &
        lighthouse=$!
    fi
    export TORCHFT_LIGHTHOUSE=http://$host:$port MASTER_ADDR=127.0.0.1 MASTER_PORT=0
    replicas=()
    for ((r = first; r < last; r++)); do
        # each process's output through a sed of its own, which writes whole
        # lines: torchft's logger writes a line in pieces, so into the one
        # shared log a progress line could be glued to another process's piece
        (export REPLICA_GROUP_ID=$r; "${wrap[@]}" "$py" "$@" || "${wrap[@]}" "$py" "$@") \
            > >(sed -u '') 2> >(sed -u '' >&2) &
        replicas+=($!)
    done
    rc=0
    for p in "${replicas[@]}"; do wait "$p" || rc=1; done
    if [[ -n $lighthouse ]]; then
        kill "$lighthouse" 2>/dev/null || true
        wait "$lighthouse" 2>/dev/null || true
    fi
    exit "$rc"
fi

STEPS=120
KILL_STEP=60
CKPT_EVERY=25
NPROC=4
BATCH=8
IMAGE=32
THREADS=1
ROUNDS=1
CASES="plain-nofault live-nofault live-kill live-kill-noreplace restart-kill torchrun-kill live-stop"
TORCHFT=
BUILD=$ROOT/build
OUT=
TIMEOUT=300  # bound on each case
NETNS=0
NETNS_SH=$HERE/netns/netns.sh

usage() { sed -n '2,60p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [[ $# -gt 0 ]]; do
    case "$1" in
        --steps) STEPS=$2; shift 2 ;;
        --kill-step) KILL_STEP=$2; shift 2 ;;
        --checkpoint-every) CKPT_EVERY=$2; shift 2 ;;
        --nproc) NPROC=$2; shift 2 ;;
        --batch-size) BATCH=$2; shift 2 ;;
        --image-size) IMAGE=$2; shift 2 ;;
        --threads) THREADS=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --cases) CASES=$2; shift 2 ;;
        --torchft) TORCHFT=$2; shift 2 ;;
        --build) BUILD=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --timeout) TIMEOUT=$2; shift 2 ;;
        --netns) NETNS=1; shift ;;
        -h|--help) usage 0 ;;
        *) echo "unknown argument: $1" >&2; usage 2 ;;
    esac
done
for c in $CASES; do
    case $c in
        plain-nofault|live-nofault|live-kill|live-kill-noreplace|restart-kill|torchrun-kill|live-stop|torchft-kill) ;;
        live-cut) ((NETNS)) || { echo "case live-cut needs --netns (a link to cut)" >&2; exit 2; } ;;
        *) echo "unknown case '$c'" >&2; exit 2 ;;
    esac
done
if ((NETNS)); then
    ((NPROC % 2 == 0)) || { echo "--netns: --nproc must be even (two nodes)" >&2; exit 2; }
fi
[[ -n $TORCHFT && $CASES != *torchft-kill* ]] && CASES+=" torchft-kill"
((NPROC >= 2)) || { echo "--nproc must be >= 2 (rank 1 fails)" >&2; exit 2; }
((KILL_STEP > 5 && KILL_STEP < STEPS - 10)) ||
    { echo "--kill-step must leave 5 steps before and 10 after it" >&2; exit 2; }
BUILD=$(cd "$BUILD" 2>/dev/null && pwd || echo "$BUILD")
DTRAIN=$BUILD/dtrain
[[ -x $DTRAIN ]] || { echo "$DTRAIN missing: ninja -C build -j1 dtrain" >&2; exit 1; }
# shellcheck source=bench/peer_python.sh
source "$HERE/peer_python.sh"
if [[ $CASES == *torch* ]]; then
    peer_select "$DTRAIN" || exit 1
    PEER_LD=$(sed -n 's/^LD_LIBRARY_PATH=//p' <<<"${PEER_ENV[1]:-}")
fi
OUT=${OUT:-$(mktemp -d /tmp/dtrain-recovery-bench.XXXXXX)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
RESULTS=$OUT/results.jsonl
: >"$RESULTS"

# --- processes ------------------------------------------------------------------
# Every process of a case carries RECOVERY_BENCH_TAG=<tag> in its environment
# (launchers put workers in process groups of their own): the workers to fail
# are found, and whatever is left is killed, by that tag, never by name.
TAG=
MAIN_PID=
tagged() {  # TAG [VAR=VALUE]: pids whose environment holds the tag (and VAR=VALUE)
    "$PY" "$REPORT" pids "$@"
}
cleanup() {
    local p
    [[ -n $MAIN_PID ]] && kill -KILL -- "-$MAIN_PID" 2>/dev/null
    if [[ -n $TAG ]]; then
        for p in $(tagged "$TAG"); do kill -KILL "$p" 2>/dev/null || true; done
    fi
    MAIN_PID=
    TAG=
}
netns_up() { bash "$NETNS_SH" up >&2 && bash "$NETNS_SH" verify 2 >&2; }
finish() {
    cleanup
    if ((NETNS)); then bash "$NETNS_SH" down >/dev/null 2>&1 || true; fi
}
trap finish EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM

free_port() {
    "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
now_ns() { local t=$EPOCHREALTIME; echo "${t//[!0-9]/}000"; }

# committed LOG STEP: true once rank 0 printed "step STEP/" (or a later step)
committed() {
    awk -v s="$2" '{ if (match($0, /step [0-9]+\//)) { v = substr($0, RSTART + 5, RLENGTH - 6) + 0
                     if (v >= s) { found = 1; exit } } } END { exit !found }' "$1" 2>/dev/null
}

# --- the commands ----------------------------------------------------------------
TRAIN=("$DTRAIN" train --model resnet18 --dataset synthetic
    --data-dir "3x${IMAGE}x${IMAGE}:10:$((STEPS * NPROC * BATCH))" --image-size "$IMAGE"
    --batch-size "$BATCH" --epochs 1 --lr 0.05 --momentum 0.9 --weight-decay 0 --seed 0
    --threads "$THREADS" --progress-steps 1 --device cpu)
PEER_ARGS=(--steps "$STEPS" --batch-size "$BATCH" --image-size "$IMAGE" --num-classes 10
    --lr 0.05 --momentum 0.9 --seed 0 --threads "$THREADS")

# case_cmd CASE DIR PORT [NODE] -> CMD: the case's command; with --netns,
# node NODE's (0 or 1), run inside its namespace.
case_cmd() {
    local c=$1 dir=$2 port=$3 node=${4:-0}
    local run=("$DTRAIN" run --nnodes 1 --nproc-per-node "$NPROC" --master-port "$port")
    local torchrun=(--nnodes 1 --nproc_per_node "$NPROC" --rdzv_backend c10d
        --rdzv_endpoint "127.0.0.1:$port")
    local ns=() torchrun_env=()
    if ((NETNS)); then
        local nproc=$((NPROC / 2)) master=10.213.0.1:$port is_host=false
        ((node == 0)) && is_host=true
        ns=(ip netns exec "dtrainbench$node" env "GLOO_SOCKET_IFNAME=dtb$node")
        run=("$DTRAIN" run --nnodes 2 --nproc-per-node "$nproc" --rdzv-backend c10d
            --rdzv-endpoint "$master" --rdzv-id "rb-$port" --rdzv-conf "is_host=$is_host")
        # Note [torchrun 2.x agent store] (bench/peer/torchrun_group.py)
        torchrun_env=(env TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1)
        torchrun=(--nnodes 2 --nproc_per_node "$nproc" --rdzv_backend c10d
            --rdzv_endpoint "$master" --rdzv_id "rb-$port" --rdzv_conf "is_host=$is_host"
            --local_addr "10.213.0.$((node + 1))")
    fi
    case_cmd_in "$c" "$dir"
    CMD=("${ns[@]}" "${CMD[@]}")
}
case_cmd_in() {  # uses case_cmd's run, torchrun and port
    local c=$1 dir=$2
    case $c in
        plain-nofault) CMD=("${run[@]}" -- "${TRAIN[@]}") ;;
        live-nofault) CMD=("${run[@]}" --recovery live -- "${TRAIN[@]}") ;;
        live-cut) CMD=("${run[@]}" --recovery live --max-restarts 0 -- "${TRAIN[@]}") ;;
        live-kill) CMD=("${run[@]}" --recovery live --max-restarts 1 -- "${TRAIN[@]}") ;;
        live-kill-noreplace) CMD=("${run[@]}" --recovery live --max-restarts 0 -- "${TRAIN[@]}") ;;
        live-stop) CMD=("${run[@]}" --recovery live --max-restarts 0 -- "${TRAIN[@]}") ;;
        restart-kill)
            CMD=("${run[@]}" --recovery restart --max-restarts 1 -- "${TRAIN[@]}"
                --checkpoint-dir "$dir/ckpt" --checkpoint-every "$CKPT_EVERY") ;;
        torchrun-kill)
            CMD=("${PEER_ENV[@]}" "${torchrun_env[@]}" "$PEER_PY" -m torch.distributed.run "${torchrun[@]}"
                --max_restarts 3 "$HERE/peer/recovery_worker.py" --mode ddp
                "${PEER_ARGS[@]}" --checkpoint-dir "$dir/ckpt" --checkpoint-every "$CKPT_EVERY") ;;
        torchft-kill)
            local node_arg=-
            ((NETNS)) && node_arg=$node
            CMD=(bash "$HERE/recovery.sh" --torchft-job "$TORCHFT" "$NPROC" "$port"
                "${PEER_LD:-}" "$PEER_PY" "$node_arg" -- "$HERE/peer/recovery_worker.py" --mode torchft
                --world "$NPROC" "${PEER_ARGS[@]}") ;;
    esac
}

# run_case CASE ROUND: one run; appends a JSON line to RESULTS
run_case() {
    local c=$1 round=$2 dir log port start end fault_ns='' fault=none status=ok pid='' deadline
    dir=$OUT/$c.$round
    rm -rf "$dir"
    mkdir -p "$dir"
    log=$dir/log
    port=$(free_port)
    case_cmd "$c" "$dir" "$port"
    printf '%q ' "${CMD[@]}" >"$dir/cmd"
    TAG=recovery-bench-$$-$c-$round
    start=$(now_ns)
    # every launcher writes to one stamper, so rank 0's lines and the
    # library's share one clock and one log
    local stamp_fd node1=''
    exec {stamp_fd}> >("$PY" "$REPORT" stamp >"$log")
    env RECOVERY_BENCH_TAG="$TAG" OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS" \
        timeout --kill-after=5 "$TIMEOUT" "${CMD[@]}" </dev/null >&"$stamp_fd" 2>&1 &
    MAIN_PID=$!
    if ((NETNS)); then
        sleep 1  # node 0 first: it hosts the rendezvous and is node rank 0
        case_cmd "$c" "$dir" "$port" 1
        printf '\n%q ' "${CMD[@]}" >>"$dir/cmd"
        env RECOVERY_BENCH_TAG="$TAG" OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS" \
            timeout --kill-after=5 "$TIMEOUT" "${CMD[@]}" </dev/null >&"$stamp_fd" 2>&1 &
        node1=$!
    fi
    deadline=$((SECONDS + TIMEOUT))
    case $c in
        *-kill|*-kill-*|*-stop|*-cut)
            fault="kill"
            [[ $c == *-stop ]] && fault=stop
            [[ $c == *-cut ]] && fault="cut"
            # the worker is looked up a few steps early, so the fault follows
            # the commit of --kill-step by one poll (20 ms), not by a /proc scan
            while ! committed "$log" $((KILL_STEP - 3)); do
                if ! kill -0 "$MAIN_PID" 2>/dev/null || ((SECONDS > deadline)); then status=no-start; break; fi
                sleep 0.1
            done
            if [[ $status == ok && $fault != cut ]]; then
                if [[ $c == torchft-kill ]]; then
                    pid=$(tagged "$TAG" REPLICA_GROUP_ID=1 recovery_worker | head -n 1)
                else
                    pid=$(tagged "$TAG" RANK=1 | head -n 1)
                fi
                [[ -n $pid ]] || status=no-pid
            fi
            while [[ $status == ok ]] && ! committed "$log" "$KILL_STEP"; do
                if ! kill -0 "$MAIN_PID" 2>/dev/null || ((SECONDS > deadline)); then status=no-fault; break; fi
                sleep 0.02
            done
            if [[ $status == ok ]]; then
                fault_ns=$(now_ns)
                case $fault in
                    kill) kill -KILL "$pid" ;;
                    stop) kill -STOP "$pid" ;;
                    cut) ip netns exec dtrainbench1 ip link set dtb1 down ;;
                esac
            fi ;;
    esac
    if [[ $fault == stop && $status == ok ]]; then
        # the others finish without it; then the stopped worker is ended
        while (($(grep -c 'finished at step' "$log" || true) < NPROC - 1)); do
            if ! kill -0 "$MAIN_PID" 2>/dev/null || ((SECONDS > deadline)); then break; fi
            sleep 0.2
        done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$MAIN_PID" || status=${status/#ok/exit-$?}
    end=$(now_ns)
    if [[ -n $node1 ]]; then
        # node 1 ends with node 0 (a cut node 1 cannot: it is killed below)
        local until=$((SECONDS + 30))
        while [[ $fault != cut ]] && kill -0 "$node1" 2>/dev/null && ((SECONDS < until)); do
            sleep 0.2
        done
        kill -0 "$node1" 2>/dev/null && kill -KILL "$node1" 2>/dev/null
        wait "$node1" || true
    fi
    MAIN_PID=
    cleanup
    exec {stamp_fd}>&-
    sleep 0.5  # the stamper drains
    # a cut link: namespaces made afresh, shaped again, for the next case
    [[ $fault == cut ]] && netns_up >/dev/null
    local world_fixed=true
    [[ $c == torchft-kill ]] && world_fixed=false
    "$PY" "$REPORT" case "$log" "$(printf '{"name":"%s","round":%d,"fault":"%s","fault_ns":%s,"start_ns":%s,"end_ns":%s,"steps":%d,"world":%d,"batch":%d,"fixed_batch":%s,"status":"%s","dir":"%s"}' \
        "$c" "$round" "$fault" "${fault_ns:-0}" "$start" "$end" "$STEPS" "$NPROC" "$BATCH" \
        "$world_fixed" "$status" "$dir")" >>"$RESULTS"
    echo "  $c #$round: $status; $(tail -n 1 "$RESULTS" | "$PY" -c 'import json,sys; r=json.load(sys.stdin); print(", ".join(f"{k} {r[k]:.3f}" if isinstance(r[k], float) else f"{k} {r[k]}" for k in ("step_s","steps_per_s","to_next_s","beyond_s","redone","lost","last_step","wall_s") if k in r))')" >&2
    [[ $status == ok ]] || tail -n 8 "$log" | sed 's/^/    /' >&2
}

if ((NETNS)); then netns_up || { echo "--netns: cannot make the namespaces (root?)" >&2; exit 1; }; fi
echo "load before: $(uptime)" >&2
echo "out: $OUT" >&2
if [[ -n ${PEER_PY:-} ]]; then peer_versions >&2; fi
for c in $CASES; do
    case_cmd "$c" "$OUT/$c.<round>" '<port>'
    echo "== $c: OMP_NUM_THREADS=$THREADS ${CMD[*]}" >&2
done
for ((round = 1; round <= ROUNDS; round++)); do
    for c in $CASES; do
        run_case "$c" "$round"
        sleep 1
    done
done
echo "load after:  $(uptime)" >&2

echo
if ((NETNS)); then
    echo "Two nodes of $((NPROC / 2)) workers in network namespaces, one link shaped to" \
         "${DTRAINBENCH_RATE:-1gbit} each way; rank 1 on node 0, the cut is node 1's link."
fi
echo "ResNet-18 (10 classes), synthetic 3x${IMAGE}x${IMAGE}, $NPROC workers x batch $BATCH" \
     "x $THREADS thread(s) on the CPU, $STEPS steps; fault on rank 1 after step $KILL_STEP;" \
     "checkpoints (restart, torchrun) every $CKPT_EVERY steps. Median (min–max) over the rounds."
echo
"$PY" "$REPORT" table "$RESULTS"
echo
echo "(per-case figures: $RESULTS; each case's stamped log and command in $OUT/<case>.<round>/)"
