#!/usr/bin/env bash
# Starts one `dtrain run` agent per host over plain ssh; the agents meet in a
# c10d rendezvous hosted by the agent on the first host and start the workers.
# No scheduler, no shared daemon: just hosts you can ssh to (keys, no
# password prompts) that have dtrain at the same path.
#
#   deploy/ssh/launch.sh [OPTIONS] HOST [HOST...] -- PROGRAM [ARGS...]
#
#   deploy/ssh/launch.sh --nproc-per-node 2 10.0.0.1 10.0.0.2 -- \
#       dtrain train --model cnn --dataset fashion-mnist \
#       --checkpoint-dir /shared/ckpt/fmnist
#
# Options:
#   --hostfile FILE        hosts, one per line (# comments), after any given inline
#   --nproc-per-node N     workers per host (default 1)
#   --nnodes N|MIN:MAX     default: the number of hosts. MIN:MAX keeps training
#                          while at least MIN agents are alive
#   --port P               rendezvous port on the first host (default 29400)
#   --run-id ID            rendezvous id (default dtrain-<time>-<pid>)
#   --max-restarts K       group restarts after a failure (default 3)
#   --dtrain PATH          dtrain on the hosts (default: dtrain on their PATH)
#   --chdir DIR            directory to run in on the hosts (default: ssh's, $HOME)
#   --env NAME=VALUE       set on the hosts; repeatable (GLOO_SOCKET_IFNAME=eth0)
#   --ssh-option OPT       extra ssh -o option; repeatable (Port=2222)
#   --timeout S            stop everything after S seconds (default 0: none)
#   --grace S              on stop, seconds agents get to stop workers (default 30)
#   --dry-run              print the ssh commands, run nothing
#
# Hosts are used as given: they must resolve to a routable address on every
# host, the first one included (Debian maps a machine's own name to 127.0.1.1;
# prefer IP addresses, or pass --env GLOO_SOCKET_IFNAME=<interface>). Besides
# the rendezvous port, node rank 0 opens a store and every worker opens Gloo
# connections on free ports: the hosts must reach each other on any TCP port.
#
# Stopping: Ctrl-C (or SIGTERM, or --timeout) sends SIGTERM to every remote
# agent through a second ssh (the agent then stops its workers), waits --grace
# seconds for the sessions to end, then closes them. Exit status: 0 when all
# agents succeeded; else the first failing agent's status (130 after Ctrl-C,
# 124 after --timeout, 255 when ssh itself failed).
set -euo pipefail

PROG=${0##*/}
die() { printf '%s: %s\n' "$PROG" "$*" >&2; exit 2; }
note() { printf '%s: %s\n' "$PROG" "$*" >&2; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

# quote ARG: ARG as one word for a POSIX shell: as is when it is plain,
# else single-quoted (the remote login shell may be dash, which does not read
# the $'...' that bash's printf %q can produce).
quote() {
  if [[ "$1" =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then
    printf '%s' "$1"
  else
    printf "'%s'" "${1//\'/\'\\\'\'}"
  fi
}

hosts=()
nproc=1
nnodes=""
port=29400
run_id="dtrain-$(date +%Y%m%d-%H%M%S)-$$"
max_restarts=3
dtrain=dtrain
chdir=""
envs=()
ssh_opts=(-o BatchMode=yes -o ConnectTimeout=10 -o ServerAliveInterval=15 -o ServerAliveCountMax=4)
timeout_s=0
grace_s=30
dry_run=0
program=()

need() { [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --hostfile) need "$@"; [[ -r "$2" ]] || die "cannot read --hostfile $2"
                while read -r line; do
                  line=${line%%#*}; line=${line//[[:space:]]/}
                  [[ -n "$line" ]] && hosts+=("$line")
                done < "$2"; shift 2 ;;
    --nproc-per-node) need "$@"; nproc=$2; shift 2 ;;
    --nnodes) need "$@"; nnodes=$2; shift 2 ;;
    --port) need "$@"; port=$2; shift 2 ;;
    --run-id) need "$@"; run_id=$2; shift 2 ;;
    --max-restarts) need "$@"; max_restarts=$2; shift 2 ;;
    --dtrain) need "$@"; dtrain=$2; shift 2 ;;
    --chdir) need "$@"; chdir=$2; shift 2 ;;
    --env) need "$@"; [[ "$2" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "--env wants NAME=VALUE, got '$2'"
           envs+=("$2"); shift 2 ;;
    --ssh-option) need "$@"; ssh_opts+=(-o "$2"); shift 2 ;;
    --timeout) need "$@"; timeout_s=$2; shift 2 ;;
    --grace) need "$@"; grace_s=$2; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --) shift; program=("$@"); break ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) hosts+=("$1"); shift ;;
  esac
done

[[ ${#hosts[@]} -gt 0 ]] || die "no hosts given (see --help)"
[[ ${#program[@]} -gt 0 ]] || die "no program: put the worker command after '--'"
for n in "$nproc" "$port" "$max_restarts" "$timeout_s" "$grace_s"; do
  [[ "$n" =~ ^[0-9]+$ ]] || die "expected a whole number, got '$n'"
done
[[ -n "$nnodes" ]] || nnodes=${#hosts[@]}
[[ "$nnodes" =~ ^[0-9]+(:[0-9]+)?$ ]] || die "--nnodes wants N or MIN:MAX, got '$nnodes'"
[[ "$run_id" =~ ^[A-Za-z0-9._-]+$ ]] || die "--run-id may only use letters, digits, . _ -"
max_nodes=${nnodes#*:}
(( ${#hosts[@]} <= max_nodes )) || die "${#hosts[@]} hosts but --nnodes $nnodes allows at most $max_nodes"
elastic=0
[[ "$nnodes" == *:* && "${nnodes%%:*}" != "$max_nodes" ]] && elastic=1

# A host may be given as user@host for ssh; the rendezvous wants the address.
addrs=()
for h in "${hosts[@]}"; do addrs+=("${h#*@}"); done
rdzv_host=${addrs[0]}
[[ "$rdzv_host" == *:* ]] && rdzv_host="[$rdzv_host]"   # IPv6 literal

# remote_command I: the command line host I's login shell runs. It records the
# agent's pid in a file (removed when the agent ends) so that stop_agents can
# signal it, and exits with the agent's status.
pidfile() { printf '/tmp/%s.%s.pid' "$run_id" "$1"; }
remote_command() {
  local i=$1 is_host=false cmd="" a
  [[ $i -eq 0 ]] && is_host=true
  [[ -n "$chdir" ]] && cmd+="cd $(quote "$chdir") && "
  cmd+="{ env"
  for a in "${envs[@]}"; do cmd+=" $(quote "$a")"; done
  # is_host: the first host hosts the rendezvous store whatever its name
  # resolves to; local_addr: the address the others reach this host at.
  local args=("$dtrain" run
    --nnodes "$nnodes" --nproc-per-node "$nproc"
    --rdzv-backend c10d --rdzv-endpoint "$rdzv_host:$port" --rdzv-id "$run_id"
    --rdzv-conf "is_host=$is_host,local_addr=${addrs[$i]}"
    --max-restarts "$max_restarts" --
    "${program[@]}")
  for a in "${args[@]}"; do cmd+=" $(quote "$a")"; done
  cmd+=" & pid=\$!; echo \$pid > $(pidfile "$i"); wait \$pid; rc=\$?; rm -f $(pidfile "$i"); exit \$rc; }"
  printf '%s' "$cmd"
}

if [[ $dry_run -eq 1 ]]; then
  for i in "${!hosts[@]}"; do
    printf 'ssh'
    for a in "${ssh_opts[@]}" -n "${hosts[$i]}"; do printf ' %s' "$(quote "$a")"; done
    printf ' %s\n' "$(quote "$(remote_command "$i")")"
  done
  exit 0
fi

pids=()      # local ssh client of host i
status=()    # its exit status once it ended
stopping=""  # why we are stopping everything: interrupt / timeout / failure

# Start the agents, each line of output tagged with its host index and name.
for i in "${!hosts[@]}"; do
  tag="[$i:${hosts[$i]}]"
  ssh "${ssh_opts[@]}" -n "${hosts[$i]}" "$(remote_command "$i")" \
    > >(sed -u "s|^|$tag |") 2>&1 &
  pids[i]=$!
done
note "run $run_id: ${#hosts[@]} agents, rendezvous at $rdzv_host:$port, nnodes $nnodes"

# reap: records the status of every ssh client that has ended and sets
# `running` to the number still running (no $(...): a subshell could not wait).
running=0
reap() {
  local i rc
  running=0
  for i in "${!pids[@]}"; do
    if [[ -n "${status[i]:-}" ]]; then continue; fi
    if kill -0 "${pids[i]}" 2>/dev/null; then
      running=$((running + 1))
    else
      rc=0
      wait "${pids[i]}" || rc=$?
      status[i]=$rc
      if [[ $rc -ne 0 ]]; then note "agent on ${hosts[$i]} exited with status $rc"; fi
    fi
  done
}

# stop_agents: SIGTERM to every remote agent still running (in parallel, each
# ssh bounded by ConnectTimeout and ServerAlive*), up to --grace seconds for
# the sessions to end, then the local ssh clients left are killed.
stop_agents() {
  local i deadline killers=()
  for i in "${!pids[@]}"; do
    if [[ -n "${status[i]:-}" ]]; then continue; fi
    ssh "${ssh_opts[@]}" -n "${hosts[$i]}" \
      "kill -TERM \$(cat $(pidfile "$i") 2>/dev/null) 2>/dev/null; rm -f $(pidfile "$i")" \
      </dev/null >/dev/null 2>&1 &
    killers+=($!)
  done
  if [[ ${#killers[@]} -gt 0 ]]; then wait "${killers[@]}" 2>/dev/null || true; fi
  deadline=$((SECONDS + grace_s))
  reap
  while [[ $running -gt 0 && $SECONDS -lt $deadline ]]; do
    sleep 1
    reap
  done
  for i in "${!pids[@]}"; do
    if [[ -z "${status[i]:-}" ]]; then kill "${pids[i]}" 2>/dev/null || true; fi
  done
  reap
}

# shellcheck disable=SC2317 # called by the trap below
on_signal() {
  if [[ -n "$stopping" ]]; then   # a second Ctrl-C: no more grace
    grace_s=0
  else
    stopping=interrupt
  fi
}
trap on_signal INT TERM HUP

while :; do
  reap
  if [[ $running -eq 0 ]]; then break; fi
  if [[ -z "$stopping" && $timeout_s -gt 0 && $SECONDS -ge $timeout_s ]]; then
    note "--timeout $timeout_s s reached"
    stopping=timeout
  fi
  if [[ -z "$stopping" && $elastic -eq 0 ]]; then
    # A fixed-size job cannot go on without an agent: do not let the others
    # wait out the rendezvous timeout for a host that never came.
    for i in "${!status[@]}"; do
      if [[ "${status[i]}" -ne 0 ]]; then stopping=failure; break; fi
    done
  fi
  if [[ -n "$stopping" ]]; then
    case "$stopping" in
      interrupt) note "interrupted: stopping the agents (Ctrl-C again: no grace)" ;;
      failure) note "an agent failed: stopping the others" ;;
    esac
    stop_agents
    break
  fi
  sleep 1
done

# Exit status: first failing agent's, or why we stopped.
case "$stopping" in
  interrupt) exit 130 ;;
  timeout) exit 124 ;;
esac
for i in "${!hosts[@]}"; do
  rc=${status[i]:-255}
  if [[ $rc -ne 0 ]]; then exit "$rc"; fi
done
note "run $run_id: all agents succeeded"
exit 0
