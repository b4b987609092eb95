#!/usr/bin/env bash
# Issue 4 (a): recovery time after a worker is SIGKILLed, `dtrain run` vs
# torchrun, same scenario, same machine. torchrun is the PyTorch of dtrain's
# LibTorch version (bench/peer_python.sh: scripts/peer-torch.sh's venv for 2.x,
# /usr/bin/python3 = python3-torch for Debian's 1.13; DTRAIN_PEER_PYTHON
# overrides); both versions are printed.
#
#   bench/elastic/recovery_vs_torchrun.sh [--repeats 5] [--kill-step 20]
#       [--intervals "default 0.1"] [--nproc 2] [--checkpoint-every 8]
#       [--build DIR] [--out DIR] [--timeout SECS] [--only dtrain|torchrun]
#       [--impls "dtrain torchrun"]
#
# Per launcher, --nproc workers on one node, OMP_NUM_THREADS=1, --max-restarts
# 3, c10d rendezvous on 127.0.0.1:<free port>:
#   torchrun: python3 -m torch.distributed.run ... bench/peer/elastic_worker.py
#   dtrain:   BUILD/dtrain run ... -- BUILD/bench/elastic/elastic_bench_worker
# Each --intervals entry is a monitor interval in seconds given to both
# launchers, or "default" (no flag: each launcher's own default; torchrun's is
# 5 s in torch 1.13, 0.1 s in 2.x). One trial: start the launcher, wait for STEP <kill-step> of restart 0,
# SIGKILL rank 1 (its pid file), wait for the first STEP of restart 1 on every
# rank, stop the launcher. Recovery = worker's STEP timestamp - kill timestamp
# (both CLOCK_REALTIME). Prints a markdown table (median/min/max over the
# repeats, and the ratio torchrun/dtrain) and the commands. --impls may add
# torchrun-cpp: torchrun (--no_python) restarting dtrain's C++ worker, which
# separates the launcher's share of the recovery from the worker's start-up.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=bench/peer_python.sh
source "$ROOT/bench/peer_python.sh"
PEER=$ROOT/bench/peer/elastic_worker.py

REPEATS=5
KILL_STEP=20
INTERVALS="default 0.1"
NPROC=2
CKPT_EVERY=8  # kill at 20 always resumes from step 16 (no race with a save)
BUILD=$ROOT/build
OUT=
TIMEOUT=180   # bound on each wait of a trial (start-up, recovery)
ONLY=
IMPLS="dtrain torchrun"
MAX_RESTARTS=3
KILL_RANK=1

usage() { sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [[ $# -gt 0 ]]; do
    case "$1" in
        --repeats) REPEATS=$2; shift 2 ;;
        --kill-step) KILL_STEP=$2; shift 2 ;;
        --intervals) INTERVALS=$2; shift 2 ;;
        --nproc) NPROC=$2; shift 2 ;;
        --checkpoint-every) CKPT_EVERY=$2; shift 2 ;;
        --build) BUILD=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --timeout) TIMEOUT=$2; shift 2 ;;
        --only) ONLY=$2; shift 2 ;;
        --impls) IMPLS=$2; shift 2 ;;
        -h|--help) usage 0 ;;
        *) echo "unknown argument: $1" >&2; usage 2 ;;
    esac
done
[[ -z $ONLY || $ONLY == dtrain || $ONLY == torchrun ]] || { echo "--only dtrain|torchrun" >&2; exit 2; }
[[ -n $ONLY ]] && IMPLS=$ONLY
for impl in $IMPLS; do
    [[ $impl == dtrain || $impl == torchrun || $impl == torchrun-cpp ]] \
        || { echo "unknown launcher '$impl' (dtrain, torchrun, torchrun-cpp)" >&2; exit 2; }
done
[[ $NPROC -ge 2 ]] || { echo "--nproc must be >= 2 (rank $KILL_RANK is killed)" >&2; exit 2; }
for mi in $INTERVALS; do
    [[ $mi == default || $mi =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "bad interval '$mi'" >&2; exit 2; }
done
BUILD=$(cd "$BUILD" 2>/dev/null && pwd || echo "$BUILD")
DTRAIN=$BUILD/dtrain
peer_select "$DTRAIN" || exit 1
PY=("${PEER_ENV[@]}" "$PEER_PY")
peer_versions >&2
# torchrun's own default monitor interval: 5 s in torch 1.13, 0.1 s in 2.x
TORCHRUN_MI_DEFAULT=$("${PY[@]}" -c 'from torch.distributed.run import get_args_parser
print(get_args_parser().get_default("monitor_interval"))' 2>/dev/null || echo '?')
WORKER=$BUILD/bench/elastic/elastic_bench_worker
OUT=${OUT:-$(mktemp -d /tmp/dtrain-elastic-bench.XXXXXX)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
RESULTS=$OUT/results.tsv
: >"$RESULTS"

# --- process bookkeeping ------------------------------------------------------
# The launcher runs under `timeout` (a process-group leader). Workers may sit in
# process groups of their own (dtrain run puts each in one), so every pid file a
# worker wrote is also killed at the end.
LAUNCHER_PG=
TRIAL_DIR=
is_worker() {  # PID: still alive and one of our workers (not a recycled pid)
    local cmd
    cmd=$( { tr '\0' ' ' <"/proc/$1/cmdline"; } 2>/dev/null) || return 1
    [[ $cmd == *elastic_bench_worker* || $cmd == *elastic_worker.py* ]]
}
kill_workers() {  # DIR: SIGKILL every live worker that wrote a pid file there
    local f p
    for f in "$1"/pid.*; do
        [[ -f $f ]] || continue
        p=$(<"$f") || continue
        [[ $p =~ ^[0-9]+$ ]] && is_worker "$p" && kill -KILL "$p" 2>/dev/null || true
    done
}
stop_launcher() {  # SIGTERM the launcher's group, wait up to 10 s, then SIGKILL
    local i
    if [[ -n $LAUNCHER_PG ]]; then
        kill -TERM -- "-$LAUNCHER_PG" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do
            kill -0 "$LAUNCHER_PG" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL -- "-$LAUNCHER_PG" 2>/dev/null || true
        wait "$LAUNCHER_PG" 2>/dev/null || true
        LAUNCHER_PG=
    fi
    [[ -n $TRIAL_DIR ]] && kill_workers "$TRIAL_DIR"
    TRIAL_DIR=
}
trap stop_launcher EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM

free_port() {
    "${PY[@]}" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
now_ns() {  # CLOCK_REALTIME in ns, as `date +%s%N` but without a fork
    local t=$EPOCHREALTIME
    echo "${t//[!0-9]/}000"
}

# first_step LOG RESTART [STEP]: prints "<ranks seen> <min ns> <max ns>" over the
# first STEP line of each rank with that restart count (and, with STEP, only
# lines of that step). Lines may carry a launcher prefix ("[rank1]: ").
first_step() {
    awk -v rc="$2" -v want="${3:-}" '
        { i = index($0, "STEP "); if (!i || split(substr($0, i), f, " ") < 5) next
          if (f[2] != rc || (want != "" && f[4] != want)) next
          if (!(f[3] in t)) { t[f[3]] = f[5]; n++ } }
        END { lo = ""; hi = ""
              for (r in t) { if (lo == "" || t[r] < lo) lo = t[r]; if (hi == "" || t[r] > hi) hi = t[r] }
              print n + 0, lo, hi }' "$1"
}

# event LOG WORD RESTART min|max KILL_NS [FIELD]: seconds from KILL_NS to the
# earliest (min) or latest (max) time in field FIELD (default 4: "<WORD>
# <restart> <rank> <ns>") of the WORD lines of that restart.
event() {
    awk -v w="$2 " -v rc="$3" -v how="$4" -v k="$5" -v fi="${6:-4}" '
        { i = index($0, w); if (!i || split(substr($0, i), f, " ") < fi || f[2] != rc) next
          if (m == "" || (how == "min" ? f[fi] < m : f[fi] > m)) m = f[fi] }
        END { if (m != "") printf "%.3f", (m - k) / 1e9 }' "$1"
}

# wait_for LOG RESTART STEP NRANKS: until NRANKS ranks printed a matching STEP
# line (STEP empty: any step), the launcher exited, or TIMEOUT passed.
wait_for() {
    local deadline=$((SECONDS + TIMEOUT)) seen
    while ((SECONDS < deadline)); do
        read -r seen _ < <(first_step "$1" "$2" "$3")
        ((seen >= $4)) && return 0
        kill -0 "$LAUNCHER_PG" 2>/dev/null || { echo "launcher exited" >&2; return 1; }
        sleep 0.05
    done
    echo "timed out after ${TIMEOUT}s" >&2
    return 1
}

# --- the launchers --------------------------------------------------------------
RUN_IMPLS=
DTRAIN_MI_DEFAULT=?
for impl in $IMPLS; do
    case $impl in
        dtrain)
            if [[ ! -x $DTRAIN || ! -x $WORKER ]]; then
                echo "NOTE: $DTRAIN or $WORKER missing (build targets dtrain elastic_bench_worker); skipping dtrain" >&2
                continue
            fi
            if ! help=$(timeout 20 "$DTRAIN" run --help 2>&1) || ! grep -q -- '--max-restarts' <<<"$help" \
                || ! grep -q -- '--rdzv-endpoint' <<<"$help"; then
                echo "NOTE: '$DTRAIN run' has no --max-restarts/--rdzv-endpoint yet; skipping dtrain" >&2
                continue
            fi
            DTRAIN_MI_DEFAULT=$(grep -A2 -- '--monitor-interval' <<<"$help" | grep -oE '(=|\[)[0-9.]+' | head -n 1 | tr -d '=[' || true)
            DTRAIN_MI_DEFAULT=${DTRAIN_MI_DEFAULT:-?} ;;
        torchrun-cpp)
            if [[ ! -x $WORKER ]]; then
                echo "NOTE: $WORKER missing (build target elastic_bench_worker); skipping torchrun-cpp" >&2
                continue
            fi ;;
    esac
    RUN_IMPLS+=" $impl"
done
[[ -n $RUN_IMPLS ]] || { echo "nothing to run" >&2; exit 1; }

WORKER_ARGS=(--checkpoint-every "$CKPT_EVERY" --threads 1)
launcher_cmd() {  # IMPL INTERVAL PORT DIR -> CMD
    local impl=$1 mi=$2 port=$3 dir=$4 mif=() prog
    if [[ $impl == torchrun* ]]; then
        [[ $mi != default ]] && mif=(--monitor_interval "$mi")
        prog=("$PEER")
        [[ $impl == torchrun-cpp ]] && prog=(--no_python "$WORKER")
        # -r 2 -t 2 (stderr to a log file, teed): torchrun 1.13's default
        # redirects crash on Python 3.11 (Std(0) is not iterable there);
        # stdout stays the console, as with the default.
        CMD=("${PY[@]}" -m torch.distributed.run --nnodes 1 --nproc_per_node "$NPROC"
            --max_restarts "$MAX_RESTARTS" --rdzv_backend c10d --rdzv_endpoint "127.0.0.1:$port"
            "${mif[@]}" -r 2 -t 2 --log_dir "$dir/torchrun-logs" "${prog[@]}" "$dir" "${WORKER_ARGS[@]}")
    else
        [[ $mi != default ]] && mif=(--monitor-interval "$mi")
        CMD=("$DTRAIN" run --nnodes 1 --nproc-per-node "$NPROC" --max-restarts "$MAX_RESTARTS"
            --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" "${mif[@]}" --
            "$WORKER" "$dir" "${WORKER_ARGS[@]}")
    fi
}

# trial IMPL INTERVAL REP: one kill-and-recover; appends a line to RESULTS.
trial() {
    local impl=$1 mi=$2 rep=$3 dir port log pid t_kill n lo hi
    dir=$OUT/$impl.mi-$mi.$rep
    rm -rf "$dir"
    mkdir -p "$dir"
    log=$dir/log
    port=$(free_port)
    launcher_cmd "$impl" "$mi" "$port" "$dir"
    echo "$(printf '%q ' "${CMD[@]}")" >"$dir/cmd"
    TRIAL_DIR=$dir
    : >"$log"
    local load
    load=$(cut -d' ' -f1 /proc/loadavg)  # the 1-minute load before this trial
    env OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 timeout --kill-after=5 $((3 * TIMEOUT)) \
        "${CMD[@]}" </dev/null >"$log" 2>&1 &
    LAUNCHER_PG=$!
    local status=ok
    if ! wait_for "$log" 0 "$KILL_STEP" 1; then
        status=no-start
    else
        pid=$(cat "$dir/pid.0.$KILL_RANK" 2>/dev/null || true)
        if [[ ! $pid =~ ^[0-9]+$ ]] || ! is_worker "$pid"; then
            status=no-pid
        else
            t_kill=$(now_ns)
            kill -KILL "$pid" || true
            wait_for "$log" 1 "" "$NPROC" || status=no-recovery
        fi
    fi
    stop_launcher
    if [[ $status != ok ]]; then
        echo "  $impl mi=$mi #$rep (load before $load): FAILED ($status); last lines of $log:" >&2
        tail -n 12 "$log" | sed 's/^/    /' >&2
        printf '%s\t%s\t%s\t%s\t\t\t\t\t\t\t\n' "$impl" "$mi" "$rep" "$status" >>"$RESULTS"
        return 0
    fi
    # Breakdown: the first worker of restart 1 forked (the launcher noticed the
    # death, stopped the others, re-formed the group, spawned) and entered its
    # main (START: Python before `import torch`, C++ after loading LibTorch),
    # the last one READY (group formed, checkpoint loaded, DDP built), the first
    # STEP on any rank / on all ranks, and the step it resumed at.
    local spawn start ready resumed
    spawn=$(event "$log" START 1 min "$t_kill" 5)
    start=$(event "$log" START 1 min "$t_kill")
    ready=$(event "$log" READY 1 max "$t_kill")
    resumed=$(awk '{ i = index($0, "STEP 1 "); if (i && split(substr($0, i), f, " ") >= 5) { print f[4]; exit } }' "$log")
    read -r n lo hi < <(first_step "$log" 1 "")
    local any all
    any=$(awk -v a="$lo" -v k="$t_kill" 'BEGIN { printf "%.3f", (a - k) / 1e9 }')
    all=$(awk -v a="$hi" -v k="$t_kill" 'BEGIN { printf "%.3f", (a - k) / 1e9 }')
    printf '%s\t%s\t%s\tok\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$impl" "$mi" "$rep" "$any" "$all" \
        "$spawn" "$start" "$ready" "$resumed" "$dir" >>"$RESULTS"
    echo "  $impl mi=$mi #$rep (load before $load): first step after kill ${any}s (all ranks ${all}s; spawned ${spawn}s, main ${start}s, ready ${ready}s, resumed at step $resumed)" >&2
}

echo "load before: $(uptime)" >&2
echo "out: $OUT" >&2
for mi in $INTERVALS; do
    for impl in $RUN_IMPLS; do
        launcher_cmd "$impl" "$mi" '<port>' '<dir>'
        echo "== $impl, monitor interval $mi: OMP_NUM_THREADS=1 ${CMD[*]}" >&2
        for ((rep = 1; rep <= REPEATS; rep++)); do
            trial "$impl" "$mi" "$rep"
            sleep 1
        done
    done
done
echo "load after:  $(uptime)" >&2

"${PY[@]}" - "$RESULTS" "$DTRAIN_MI_DEFAULT" "$KILL_STEP" "$NPROC" "$CKPT_EVERY" "$TORCHRUN_MI_DEFAULT" <<'EOF'
import statistics, sys
results, dtrain_default, kill_step, nproc, ckpt, torchrun_default = sys.argv[1:7]
rows = [l.rstrip("\n").split("\t") for l in open(results) if l.strip()]
groups = {}
for r in rows:
    groups.setdefault((r[1], r[0]), []).append(r)

def stats(vals):
    return (statistics.median(vals), min(vals), max(vals)) if vals else None

def fmt(s):
    return "-" if s is None else f"{s[0]:.2f} ({s[1]:.2f}–{s[2]:.2f})"

def label(mi, impl):
    if mi != "default":
        return f"{mi} s"
    return f"default ({dtrain_default if impl == 'dtrain' else torchrun_default} s)"

print()
print(f"Recovery after SIGKILL of rank 1 at step {kill_step}: {nproc} workers, 1 thread each, "
      f"checkpoint every {ckpt} steps. Seconds from the kill; median (min–max).")
print()
print("| monitor interval | launcher | ok/runs | first step, any rank | first step, all ranks "
      "| spawned | in main | ready | torchrun / dtrain |")
print("|---|---|---|---|---|---|---|---|---|")
for mi in dict.fromkeys(r[1] for r in rows):
    med = {}
    for impl in ("dtrain", "torchrun", "torchrun-cpp"):
        g = groups.get((mi, impl))
        if not g:
            continue
        ok = [r for r in g if r[3] == "ok"]
        col = lambda i: [float(r[i]) for r in ok if r[i]]  # noqa: E731
        s_any, s_all = stats(col(4)), stats(col(5))
        med[impl] = (s_any, s_all, stats(col(6)), stats(col(7)), stats(col(8)),
                     f"{len(ok)}/{len(g)}")
    ratio = ""
    if "dtrain" in med and "torchrun" in med and med["dtrain"][0] and med["torchrun"][0]:
        ratio = (f"{med['torchrun'][0][0] / med['dtrain'][0][0]:.1f}× "
                 f"(all ranks {med['torchrun'][1][0] / med['dtrain'][1][0]:.1f}×)")
    for impl, (s_any, s_all, s_spawn, s_start, s_ready, okn) in med.items():
        print(f"| {label(mi, impl)} | {impl} | {okn} | {fmt(s_any)} | {fmt(s_all)} | "
              f"{fmt(s_spawn)} | {fmt(s_start)} | {fmt(s_ready)} | "
              f"{ratio if impl == 'dtrain' else ''} |")
print()
print("spawned: first worker of restart 1 forked (/proc start time, 10 ms ticks); in main: its "
      "START line (Python: before `import torch`; C++: after LibTorch is loaded); ready: last "
      "rank's READY (group formed, checkpoint loaded, DDP built).")
if any(r[0] == "torchrun-cpp" for r in rows):
    print()
    print("torchrun-cpp: torchrun (--no_python) restarting dtrain's C++ worker "
          "(elastic_bench_worker), to separate launcher from worker start-up.")
print()
print(f"(per-trial results: {results}; each trial's log and command in the directory named there)")
EOF
