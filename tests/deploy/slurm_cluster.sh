#!/usr/bin/env bash
# deploy/slurm/dtrain.sbatch under a real Slurm (Debian's slurmctld, slurmd and
# munge): a two-node cluster on this machine, each node in its own network and
# UTS namespace (its own address and host name, spool, pid and log paths), no
# GPUs. Submits the script in both modes with a small CPU job (cnn on a slice
# of Fashion-MNIST, gloo, --device cpu, all through the script's environment
# overrides) and checks that each trains and exits 0; then kills one rank of a
# running job and checks that the job fails with that rank named in its output.
#
#   slurm_cluster.sh DTRAIN_BINARY [check...]   checks: tasks agents kill (default all)
#
# Exit 77 (skipped, with the reason on stderr) when not root, or when unshare,
# ip or Slurm/munge are missing (scripts/install-deps.sh installs them).
# Bounded: every wait has a timeout; the EXIT trap kills every process in the
# two namespaces and munged, deletes the namespaces and the work folder.
set -euo pipefail

readonly DTRAIN_BIN="${1:?usage: slurm_cluster.sh DTRAIN_BINARY [tasks|agents|kill]...}"
shift
CHECKS=("$@")
[[ ${#CHECKS[@]} -gt 0 ]] || CHECKS=(tasks agents kill)
readonly SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
readonly SBATCH_SCRIPT="$SRC_DIR/deploy/slurm/dtrain.sbatch"
readonly FASHION="${DTRAIN_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}"

log() { printf '==> slurm: %s\n' "$*"; }
skip() { printf 'SKIP: %s\n' "$*" >&2; exit 77; }
fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

[[ $EUID -eq 0 ]] || skip "needs root (network and UTS namespaces, Slurm daemons)"
for tool in unshare nsenter ip slurmctld slurmd munged sbatch srun scontrol mungekey; do
  command -v "$tool" >/dev/null || skip "$tool not found (scripts/install-deps.sh installs Slurm and munge)"
done
[[ -x "$DTRAIN_BIN" ]] || fail "no dtrain binary at $DTRAIN_BIN"
[[ -f "$FASHION/train-images-idx3-ubyte.gz" ]] || skip "no Fashion-MNIST in $FASHION (dataset-fashion-mnist)"
ip netns add "dtrain-probe-$$" 2>/dev/null || skip "cannot create a network namespace here"
ip netns del "dtrain-probe-$$"

WORK="$(mktemp -d /tmp/dtrain-slurm.XXXXXX)"
chmod 755 "$WORK"  # munge wants its socket reachable
readonly WORK
# Namespace and veth names carry the pid, so two runs do not collide.
readonly NS1="dtrain-slurm-$$-1" NS2="dtrain-slurm-$$-2"
readonly VETH1="dsl$$a" VETH2="dsl$$b"
readonly NODE1=dtnode1 NODE2=dtnode2 ADDR1=10.231.7.1 ADDR2=10.231.7.2
MUNGED_PID=""

cleanup() {
  local rc=$? ns pids
  set +e
  for ns in "$NS1" "$NS2"; do
    if ip netns list 2>/dev/null | grep -qw "$ns"; then
      pids="$(ip netns pids "$ns" 2>/dev/null)"
      [[ -n "$pids" ]] && kill -TERM $pids 2>/dev/null
    fi
  done
  sleep 1
  for ns in "$NS1" "$NS2"; do
    if ip netns list 2>/dev/null | grep -qw "$ns"; then
      pids="$(ip netns pids "$ns" 2>/dev/null)"
      [[ -n "$pids" ]] && kill -KILL $pids 2>/dev/null
      ip netns del "$ns"
    fi
  done
  [[ -n "$MUNGED_PID" ]] && kill -TERM "$MUNGED_PID" 2>/dev/null
  if [[ $rc -ne 0 && $rc -ne 77 ]]; then
    for f in "$WORK"/log/*.log "$WORK"/jobs/*.out; do
      [[ -f "$f" ]] && { echo "---- $f (tail)"; tail -n 30 "$f"; }
    done
  fi
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Runs a command on a node: in the node's network namespace, in a UTS namespace
# holding the node's host name, and in a mount namespace whose /etc/hosts names
# both nodes (so `scontrol show hostnames` output resolves, as on a cluster).
# Not `ip netns exec`: it mounts a fresh /sys, hiding the cgroup mounts slurmd
# needs.
on_node() {
  local ns="$1" host="$2"
  shift 2
  nsenter --net="/run/netns/$ns" unshare --uts --mount --propagation private \
    sh -c 'hostname "$0" && mount --bind "$1" /etc/hosts && shift && exec "$@"' \
    "$host" "$WORK/hosts" "$@"
}

log "work folder $WORK"
mkdir -p "$WORK"/{munge,ctld,spool/$NODE1,spool/$NODE2,log,jobs,data,ckpt}

# ---- network: two namespaces joined by one veth pair -------------------------
ip netns add "$NS1"
ip netns add "$NS2"
ip link add "$VETH1" type veth peer name "$VETH2"
ip link set "$VETH1" netns "$NS1"
ip link set "$VETH2" netns "$NS2"
ip -n "$NS1" addr add "$ADDR1/24" dev "$VETH1"
ip -n "$NS2" addr add "$ADDR2/24" dev "$VETH2"
for pair in "$NS1:$VETH1" "$NS2:$VETH2"; do
  ip -n "${pair%%:*}" link set lo up
  ip -n "${pair%%:*}" link set "${pair#*:}" up
done
printf '127.0.0.1 localhost\n%s %s\n%s %s\n' "$ADDR1" "$NODE1" "$ADDR2" "$NODE2" >"$WORK/hosts"

# ---- munge: one daemon; its socket is a file, so both namespaces reach it ----
mungekey --create --keyfile="$WORK/munge/munge.key" >/dev/null 2>&1 ||
  dd if=/dev/urandom of="$WORK/munge/munge.key" bs=1024 count=1 status=none
chmod 755 "$WORK/munge"
chmod 600 "$WORK/munge/munge.key"
munged --force --socket="$WORK/munge/munge.socket" --key-file="$WORK/munge/munge.key" \
  --pid-file="$WORK/munge/munged.pid" --log-file="$WORK/log/munged.log" \
  --seed-file="$WORK/munge/seed"
for _ in $(seq 50); do [[ -s "$WORK/munge/munged.pid" ]] && break; sleep 0.1; done
MUNGED_PID="$(cat "$WORK/munge/munged.pid")"

# ---- Slurm: controller on node 1, one slurmd per node --------------------------
cat >"$WORK/slurm.conf" <<EOF
ClusterName=dtraintest
SlurmctldHost=$NODE1($ADDR1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$WORK/munge/munge.socket
StateSaveLocation=$WORK/ctld
SlurmctldPidFile=$WORK/ctld/slurmctld.pid
SlurmctldLogFile=$WORK/log/slurmctld.log
SlurmdSpoolDir=$WORK/spool/%n
SlurmdPidFile=$WORK/spool/slurmd-%n.pid
SlurmdLogFile=$WORK/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=5
InactiveLimit=0
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$NODE1 NodeAddr=$ADDR1 CPUs=4 RealMemory=2000 State=UNKNOWN
NodeName=$NODE2 NodeAddr=$ADDR2 CPUs=4 RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
: >"$WORK/cgroup.conf"
export SLURM_CONF="$WORK/slurm.conf"

on_node "$NS1" "$NODE1" slurmctld -f "$SLURM_CONF"
on_node "$NS1" "$NODE1" slurmd -f "$SLURM_CONF" -N "$NODE1"
on_node "$NS2" "$NODE2" slurmd -f "$SLURM_CONF" -N "$NODE2"

# Client commands run on node 1 (the login node, here also the controller).
ctl() { on_node "$NS1" "$NODE1" "$@"; }

log "waiting for both nodes to be idle"
ready=""
for _ in $(seq 60); do
  if [[ "$(ctl sinfo -h -N -o '%T' 2>/dev/null | grep -c '^idle$')" == 2 ]]; then ready=1; break; fi
  sleep 1
done
[[ -n "$ready" ]] || { ctl sinfo -N 2>&1 || true; fail "the two slurmd did not register with slurmctld in 60 s"; }

# ---- the job: a slice of Fashion-MNIST, gloo on the CPU ------------------------
# The first N records of the real files (IDX: magic, N, then the item dims).
python3 - "$FASHION" "$WORK/data" <<'PY'
import gzip, struct, sys
src, dst = sys.argv[1], sys.argv[2]
for prefix, n in (("train", 1024), ("t10k", 256)):
    for kind, dims in (("images-idx3", 3), ("labels-idx1", 1)):
        name = f"{prefix}-{kind}-ubyte.gz"
        data = gzip.open(f"{src}/{name}").read()
        shape = struct.unpack(f">{dims}I", data[4:4 + 4 * dims])
        item = 1
        for d in shape[1:]:
            item *= d
        body = data[4 + 4 * dims:4 + 4 * dims + n * item]
        gzip.open(f"{dst}/{name}", "wb").write(data[:4] + struct.pack(">I", n) + data[8:4 + 4 * dims] + body)
PY

# The script's settings, overridden through its environment (no edits): no
# GPUs, gloo, the CPU, the small model and data, two ranks per node.
export DTRAIN="$DTRAIN_BIN" DTRAIN_MODEL=cnn DTRAIN_DATASET=fashion-mnist \
  DTRAIN_DATA_DIR="$WORK/data" DTRAIN_BACKEND=gloo DTRAIN_DEVICE=cpu \
  DTRAIN_EPOCHS=1 DTRAIN_BATCH_SIZE=32 \
  DTRAIN_EXTRA_ARGS="--progress-steps 8"

# Submits the script and waits; prints the job id. Extra arguments go to sbatch.
submit() {
  local mode="$1" out="$2"
  shift 2
  # sbatch's options override the #SBATCH lines: no GPUs, small nodes.
  # Each job its own checkpoints: a shared folder would resume the finished run.
  DTRAIN_SLURM_MODE="$mode" CHECKPOINT_DIR="$WORK/ckpt/$(basename "$out" .out)" ctl sbatch --parsable --ntasks-per-node=2 --cpus-per-task=1 \
    --gpus-per-node=0 --time=5 --output="$out" --chdir="$WORK/jobs" "$@" "$SBATCH_SCRIPT"
}

# Waits (bounded) until the job has left the queue; prints its state and exit code.
wait_job() {
  local job="$1" limit="$2" state
  for _ in $(seq "$limit"); do
    state="$(ctl squeue -h -j "$job" -o '%T' 2>/dev/null || true)"
    [[ -z "$state" ]] && break
    sleep 1
  done
  if [[ -n "$state" ]]; then
    ctl scontrol show job "$job" >&2 || true
    ctl scancel "$job" || true
    fail "job $job still $state after ${limit}s"
  fi
  ctl scontrol show job "$job" | grep -o 'JobState=[A-Z_]* \|ExitCode=[0-9:]*' | tr -d ' ' | tr '\n' ' '
}

check_trains() {
  local mode="$1" out="$WORK/jobs/$1.out" job result
  log "submitting the script in mode $mode"
  job="$(submit "$mode" "$out")"
  result="$(wait_job "$job" "${DTRAIN_SLURM_JOB_LIMIT:-240}")"
  log "job $job ($mode): $result"
  [[ "$result" == *"JobState=COMPLETED"*"ExitCode=0:0"* ]] ||
    { cat "$out"; fail "mode $mode: job $job ended $result, not COMPLETED with exit 0"; }
  grep -q "mode $mode" "$out" || { cat "$out"; fail "mode $mode: the script's banner is missing"; }
  # Every rank trained: rank 0 prints the epoch's summary line.
  grep -qi "epoch 1" "$out" || { cat "$out"; fail "mode $mode: no epoch summary in the job's output"; }
}

check_killed_rank() {
  local out="$WORK/jobs/kill.out" job pid="" result p
  log "submitting a longer job in mode tasks and killing rank 3"
  job="$(DTRAIN_EPOCHS=50 submit tasks "$out")"
  # Rank 3 is the second task on node 2: find its dtrain by SLURM_PROCID.
  for _ in $(seq 120); do
    for p in $(ip netns pids "$NS2"); do
      if [[ "$(cat "/proc/$p/comm" 2>/dev/null)" == dtrain ]] &&
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'SLURM_PROCID=3'; then
        pid="$p"
      fi
    done
    [[ -n "$pid" ]] && grep -q "step" "$out" 2>/dev/null && break
    sleep 1
  done
  [[ -n "$pid" ]] || { cat "$out" 2>/dev/null; fail "rank 3's process did not start"; }
  kill -KILL "$pid"
  result="$(wait_job "$job" 120)"
  log "job $job (rank 3 killed): $result"
  [[ "$result" == *"JobState=FAILED"* ]] || { cat "$out"; fail "the job ended $result, not FAILED"; }
  grep -q "task 3: Killed" "$out" || { cat "$out"; fail "the job's output does not name task 3 as killed"; }
  grep -E "task 3|rank 3" "$out" | head -n 3 | sed 's/^/    /'
}

for check in "${CHECKS[@]}"; do
  case "$check" in
    tasks | agents) check_trains "$check" ;;
    kill) check_killed_rank ;;
    *) fail "unknown check '$check' (tasks, agents, kill)" ;;
  esac
done
log "ok: ${CHECKS[*]}"
