#!/usr/bin/env bash
# Issue 3's benchmark: DDP step time of `dtrain bench ddp` vs PyTorch DDP
# (bench/peer/pytorch_ddp_step.py), --hosts processes (default 2), Gloo,
# synthetic data, for the demo CNN, ResNet-18 and VGG-16 on small images, with
# each of --hooks (issue 20: the same DDP comm hook on both sides),
#   (a) loopback: dtrain under `dtrain run`, the peer started with env vars;
#   (b) netns:    rank r in namespace dtrainbench<r> (10.213.0.<r+1>): with 2
#                 hosts a veth pair, with more a switch, every link shaped to
#                 --rate each way with tc (bench/netns/netns.sh). Both dtrain
#                 and the peer are started with RANK/WORLD_SIZE/MASTER_ADDR/
#                 MASTER_PORT set by hand (rank 0 hosts the store).
#
#   bench/ddp_vs_pytorch.sh [--models "cnn resnet18"] [--modes "loopback netns"]
#       [--hooks "allreduce"] [--powersgd-start-iter 2] [--rounds 1]
#       [--batch-size 64] [--image-size 32] [--steps 20] [--warmup 3]
#       [--threads 1] [--bucket-cap-mb 25] [--find-unused-parameters]
#       [--rate 1gbit] [--hosts 2] [--build DIR]
#       [--out DIR] [--timeout SECS] [--only dtrain|peer] [--keep-netns]
#
# Models: cnn, resnet18, vgg16. Hooks: allreduce (DDP's own), noop (no
# communication at all: the reference rate), fp16, bf16, powersgd:R
# (PowerSGD of rank R, compressing from DDP step --powersgd-start-iter on,
# which must be <= --warmup so that every timed step is compressed). For each
# round, model and hook: dtrain, then the peer (interleaved).
# Prints per-step time, images/sec, dtrain/peer throughput ratio per hook, each
# hook's images/sec as a fraction of the same implementation's noop run, and
# the fraction of communication hidden behind backward (method:
# bench/README.md) and, over the shaped link (netns), the MB each process sent
# per DDP step. Without `dtrain bench ddp` in the build, runs the peer only.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=bench/peer_python.sh
source "$HERE/peer_python.sh"
NETNS=$HERE/netns/netns.sh
NS0=dtrainbench0 ADDR0=10.213.0.1

MODELS="cnn resnet18"
MODES="loopback netns"
HOOKS=allreduce
PSGD_START=2
ROUNDS=1
BATCH=64
IMAGE=32
STEPS=20
WARMUP=3
THREADS=1
BUCKET=25
FIND_UNUSED=()
RATE=1gbit
HOSTS=2
BUILD=$ROOT/build
OUT=
TIMEOUT=600
ONLY=
KEEP_NETNS=0

usage() { sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [[ $# -gt 0 ]]; do
    case "$1" in
        --models) MODELS=$2; shift 2 ;;
        --modes) MODES=$2; shift 2 ;;
        --hooks) HOOKS=$2; shift 2 ;;
        --powersgd-start-iter) PSGD_START=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --batch-size) BATCH=$2; shift 2 ;;
        --image-size) IMAGE=$2; shift 2 ;;
        --steps) STEPS=$2; shift 2 ;;
        --warmup) WARMUP=$2; shift 2 ;;
        --threads) THREADS=$2; shift 2 ;;
        --bucket-cap-mb) BUCKET=$2; shift 2 ;;
        --find-unused-parameters) FIND_UNUSED=(--find-unused-parameters); shift ;;
        --rate) RATE=$2; shift 2 ;;
        --hosts) HOSTS=$2; shift 2 ;;
        --build) BUILD=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --timeout) TIMEOUT=$2; shift 2 ;;
        --only) ONLY=$2; shift 2 ;;
        --keep-netns) KEEP_NETNS=1; shift ;;
        -h|--help) usage 0 ;;
        *) echo "unknown argument: $1" >&2; usage 2 ;;
    esac
done
for m in $MODELS; do [[ $m == cnn || $m == resnet18 || $m == vgg16 ]] || { echo "unknown model $m (cnn, resnet18, vgg16)" >&2; exit 2; }; done
is_count() { [[ $1 =~ ^[0-9]+$ ]] && (($1 > 0)); }
is_count "$ROUNDS" || { echo "--rounds must be a positive integer, got '$ROUNDS'" >&2; exit 2; }
{ is_count "$HOSTS" && ((HOSTS >= 2 && HOSTS <= 8)); } ||
    { echo "--hosts must be 2..8 (processes; one namespace each in netns mode), got '$HOSTS'" >&2; exit 2; }
export DTRAINBENCH_NODES=$HOSTS
[[ $WARMUP =~ ^[0-9]+$ ]] || { echo "--warmup must be a non-negative integer, got '$WARMUP'" >&2; exit 2; }
HAVE_PSGD=0
for h in $HOOKS; do
    case $h in
        allreduce|noop|fp16|bf16) ;;
        powersgd:*)
            is_count "${h#powersgd:}" || { echo "hook $h: the PowerSGD rank must be a positive integer (e.g. powersgd:2)" >&2; exit 2; }
            HAVE_PSGD=1 ;;
        *) echo "unknown hook $h (allreduce, noop, fp16, bf16, powersgd:R)" >&2; exit 2 ;;
    esac
done
[[ -n ${HOOKS// /} ]] || { echo "--hooks is empty; e.g. --hooks \"noop allreduce powersgd:2\"" >&2; exit 2; }
if ((HAVE_PSGD)); then
    { [[ $PSGD_START =~ ^[0-9]+$ ]] && ((PSGD_START >= 2)); } ||
        { echo "--powersgd-start-iter must be at least 2 (error feedback and warm start are on), got '$PSGD_START'" >&2; exit 2; }
    ((PSGD_START <= WARMUP)) ||
        { echo "--powersgd-start-iter $PSGD_START exceeds --warmup $WARMUP: timed steps would run plain allreduce; raise --warmup" >&2; exit 2; }
fi
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
        for h in $HOOKS; do
            [[ $h == allreduce ]] && continue
            grep -q -- '--comm-hook' <<<"$help" ||
                { echo "'$DTRAIN bench ddp' has no --comm-hook (hook $h)" >&2; exit 2; }
            if [[ $h == noop ]] && ! grep -q 'noop' <<<"$help"; then
                echo "'$DTRAIN bench ddp --comm-hook' has no noop; rebuild dtrain" >&2; exit 2
            fi
        done
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
set_cmds() {  # MODEL HOOK -> DCMD (dtrain worker), PCMD (peer worker)
    local image=$IMAGE dhook=() phook=()
    [[ $1 == cnn ]] && image=28  # the demo CNN takes 1x28x28
    case $2 in
        allreduce) ;;  # both sides' default: DDP's own allreduce
        powersgd:*)
            dhook=(--comm-hook powersgd --powersgd-rank "${2#powersgd:}" --powersgd-start-iter "$PSGD_START")
            phook=(--comm-hook powersgd --powersgd-rank "${2#powersgd:}" --powersgd-start-iter "$PSGD_START") ;;
        *) dhook=(--comm-hook "$2"); phook=(--comm-hook "$2") ;;
    esac
    DCMD=("$DTRAIN" bench ddp --model "$1" --batch-size "$BATCH" --image-size "$image"
        --steps "$STEPS" --warmup "$WARMUP" --json "${DTRAIN_EXTRA[@]}" "${dhook[@]}")
    PCMD=("${PEER_ENV[@]}" "$PY" "$HERE/peer/pytorch_ddp_step.py" --model "$1" --batch-size "$BATCH"
        --image-size "$image" --steps "$STEPS" --warmup "$WARMUP"
        --threads "$THREADS" --bucket-cap-mb "$BUCKET" "${FIND_UNUSED[@]}" "${phook[@]}")
}

# record MODE MODEL HOOK ROUND IMPL RC LOG: append rank 0's JSON result (tagged) to RESULTS
record() {
    "${PEER_ENV[@]}" "$PY" - "$@" "$RESULTS" <<'EOF'
import json, sys
mode, model, hook, rnd, impl, rc, log, results = sys.argv[1:9]
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
rec.update({"mode": mode, "model_name": model, "hook": hook, "round": int(rnd),
            "impl_name": impl, "rc": int(rc), "log": log})
with open(results, "a") as f:
    f.write(json.dumps(rec) + "\n")
EOF
}

# MODEL HOOK ROUND -> TAG: the runs' log names, e.g. resnet18.powersgd2.r1
set_tag() { TAG=$1.${2//:/}.r$3; }

run_loopback() {  # MODEL HOOK ROUND
    local model=$1 hook=$2 rnd=$3 port r pids log
    set_cmds "$model" "$hook"
    set_tag "$model" "$hook" "$rnd"
    if [[ $HAVE_DTRAIN == 1 ]]; then
        log=$OUT/loopback.$TAG.dtrain.log
        port=$(free_port)
        echo "== (load before $(cut -d' ' -f1 /proc/loadavg)) loopback $model $hook round $rnd dtrain: $DTRAIN run --nproc-per-node $HOSTS --master-port $port -- ${DCMD[*]}" >&2
        run_bg "$log" env "${COMMON_ENV[@]}" "$DTRAIN" run --nproc-per-node "$HOSTS" --master-port "$port" -- \
            "${DCMD[@]}"
        wait_all "$LAST_PID"
        record loopback "$model" "$hook" "$rnd" dtrain "$WAIT_RC" "$log"
        [[ $WAIT_RC == 0 ]] || tail -n 15 "$log" >&2
    fi
    if [[ $RUN_PEER == 1 ]]; then
        port=$(free_port)
        echo "== (load before $(cut -d' ' -f1 /proc/loadavg)) loopback $model $hook round $rnd pytorch: $HOSTS x ${PCMD[*]} (MASTER_PORT=$port)" >&2
        pids=()
        for r in $(seq $((HOSTS - 1)) -1 0); do
            run_bg "$OUT/loopback.$TAG.pytorch.rank$r.log" env "${COMMON_ENV[@]}" \
                MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" WORLD_SIZE="$HOSTS" RANK=$r LOCAL_RANK=$r \
                "${PCMD[@]}"
            pids+=("$LAST_PID")
        done
        wait_all "${pids[@]}"
        log=$OUT/loopback.$TAG.pytorch.rank0.log
        record loopback "$model" "$hook" "$rnd" pytorch "$WAIT_RC" "$log"
        [[ $WAIT_RC == 0 ]] || tail -n 15 "$log" "$OUT/loopback.$TAG.pytorch.rank1.log" >&2
    fi
}

# start_ns_ranks IMPL PORT CMD...: rank r in namespace dtrainbench<r> on its
# veth dtb<r>, rank 0 last (logs named by TAG)
start_ns_ranks() {
    local impl=$1 port=$2; shift 2
    local r
    NS_PIDS=()
    for r in $(seq $((HOSTS - 1)) -1 0); do
        run_bg "$OUT/netns.$TAG.$impl.rank$r.log" ip netns exec "dtrainbench$r" env "${COMMON_ENV[@]}" \
            MASTER_ADDR=$ADDR0 MASTER_PORT="$port" WORLD_SIZE="$HOSTS" RANK=$r LOCAL_RANK=0 \
            LOCAL_WORLD_SIZE=1 GLOO_SOCKET_IFNAME="dtb$r" "$@"
        NS_PIDS+=("$LAST_PID")
    done
}

run_netns() {  # MODEL HOOK ROUND
    local model=$1 hook=$2 rnd=$3 port log
    set_cmds "$model" "$hook"
    set_tag "$model" "$hook" "$rnd"
    if [[ $HAVE_DTRAIN == 1 ]]; then
        port=$(free_port "$NS0")
        echo "== (load before $(cut -d' ' -f1 /proc/loadavg)) netns $model $hook round $rnd dtrain: per namespace: RANK=r MASTER_ADDR=$ADDR0 MASTER_PORT=$port GLOO_SOCKET_IFNAME=dtb<r> ${DCMD[*]}" >&2
        start_ns_ranks dtrain "$port" "${DCMD[@]}"
        wait_all "${NS_PIDS[@]}"
        log=$OUT/netns.$TAG.dtrain.rank0.log
        record netns "$model" "$hook" "$rnd" dtrain "$WAIT_RC" "$log"
        [[ $WAIT_RC == 0 ]] || tail -n 15 "$log" "$OUT/netns.$TAG.dtrain.rank1.log" >&2
    fi
    if [[ $RUN_PEER == 1 ]]; then
        port=$(free_port "$NS0")
        echo "== (load before $(cut -d' ' -f1 /proc/loadavg)) netns $model $hook round $rnd pytorch: per namespace: RANK=r MASTER_ADDR=$ADDR0 MASTER_PORT=$port GLOO_SOCKET_IFNAME=dtb<r> ${PCMD[*]}" >&2
        start_ns_ranks pytorch "$port" "${PCMD[@]}"
        wait_all "${NS_PIDS[@]}"
        log=$OUT/netns.$TAG.pytorch.rank0.log
        record netns "$model" "$hook" "$rnd" pytorch "$WAIT_RC" "$log"
        [[ $WAIT_RC == 0 ]] || tail -n 15 "$log" "$OUT/netns.$TAG.pytorch.rank1.log" >&2
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
    for rnd in $(seq 1 "$ROUNDS"); do
        for model in $MODELS; do
            for hook in $HOOKS; do
                "run_$mode" "$model" "$hook" "$rnd"
            done
        done
    done
    if [[ $mode == netns && $KEEP_NETNS == 0 ]]; then
        "$NETNS" down >&2
        NETNS_UP=0
    fi
done
echo "load after:  $(uptime)" >&2

"${PEER_ENV[@]}" "$PY" - "$RESULTS" "$RATE" "$HOOKS" "$HOSTS" <<'EOF'
import json, math, statistics, sys
results, rate, hooks, hosts = sys.argv[1], sys.argv[2], sys.argv[3].split(), int(sys.argv[4])
recs = [json.loads(l) for l in open(results) if l.strip()]

# (mode, model, hook, impl) -> the runs (rounds) that gave a result
runs, errors, order = {}, {}, []
for r in recs:
    key = (r["mode"], r["model_name"], r.get("hook", "allreduce"), r["impl_name"])
    if key[:2] not in order:
        order.append(key[:2])
    if "error" in r:
        errors.setdefault(key, []).append(f"round {r.get('round', 1)}: {r['error']}")
    else:
        # MB each process sent per DDP step; loopback runs count nothing (lo).
        tx = r.get("wire_tx_bytes_per_step")
        if r["mode"] == "netns" and isinstance(tx, (int, float)) and tx >= 0:
            r["wire_mb"] = tx / 1e6
        runs.setdefault(key, []).append(r)


def med(key, field):
    vals = [r[field] for r in runs.get(key, [])
            if isinstance(r.get(field), (int, float)) and not math.isnan(r[field])]
    return statistics.median(vals) if vals else None


def f(v, spec):
    return "-" if v is None else format(v, spec)


cols = [("step_ms", "step ms", ".1f"), ("images_per_sec", "img/s", ".2f"),
        ("step_nosync_ms", "nosync ms", ".1f"), ("backward_ms", "bwd ms", ".1f"),
        ("backward_compute_ms", "bwd cmp", ".1f"), ("comm_ms", "comm ms", ".1f"),
        ("exposed_comm_ms", "exposed", ".1f"), ("hidden_fraction", "hidden", ".0%"),
        ("powersgd_compression_rate", "psgd rate", ".1f"), ("wire_mb", "wire MB", ".2f")]
print()
netns = ("two namespaces over veth" if hosts == 2
         else f"{hosts} namespaces on a switch, every link") + f" shaped to {rate}"
print(f"DDP step benchmark, {hosts} processes, Gloo; loopback = 127.0.0.1, netns = {netns}")
hdr = (f"{'mode':8s} {'model':8s} {'hook':10s} {'impl':7s} {'n':>2s}"
       + "".join(f" {h:>9s}" for _, h, _ in cols)
       + f" {'ratio':>6s} {'of noop':>7s} {'of nosync':>9s}")
print(hdr)
print("-" * len(hdr))
for mode, model in order:
    present = {k[2] for k in list(runs) + list(errors) if k[:2] == (mode, model)}
    for hook in [h for h in hooks if h in present] + sorted(present - set(hooks)):
        d, p = (mode, model, hook, "dtrain"), (mode, model, hook, "pytorch")
        di, pi = med(d, "images_per_sec"), med(p, "images_per_sec")
        ratio = f"{di / pi:.3f}" if di and pi else "-"
        for impl, key in (("dtrain", d), ("pytorch", p)):
            if key not in runs and key not in errors:
                continue
            line = f"{mode:8s} {model:8s} {hook:10s} {impl:7s} {len(runs.get(key, [])):>2d}"
            line += "".join(f" {f(med(key, k), spec):>9s}" for k, _, spec in cols)
            ips = med(key, "images_per_sec")
            noop = med((mode, model, "noop", impl), "images_per_sec")
            step, nosync = med(key, "step_p50_ms"), med(key, "step_nosync_p50_ms")
            of_noop = f"{ips / noop:.0%}" if ips and noop else "-"
            of_nosync = f"{nosync / step:.0%}" if step and nosync else "-"
            line += f" {ratio if impl == 'dtrain' else '':>6s} {of_noop:>7s} {of_nosync:>9s}"
            print(line)
            for e in errors.get(key, []):
                print(f"    ERROR {mode} {model} {hook} {impl} {e}")
print("n = rounds with a result (figures: medians over them); ratio = dtrain img/s / pytorch "
      "img/s, same hook; of noop = img/s / the same implementation's noop img/s (the rate "
      "with no communication at all); of nosync = median no_sync step / median DDP step, same "
      "run; comm = standalone uncompressed allreduce + buffer broadcast; hidden = 1 - "
      "exposed/comm (exposed = median DDP step - median no_sync step); psgd rate = PowerSGD's "
      "compression rate (elements before / after, compressed matrices only); wire MB = MB "
      "each process sent per DDP step (netns only: its veth's /proc/net/dev tx bytes, read "
      "around the timed DDP steps; framing and ACKs included)")
print(f"(results: {results})")
EOF
