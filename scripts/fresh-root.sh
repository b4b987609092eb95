#!/usr/bin/env bash
# Times a README command cold, as on a fresh Debian 12 machine: in a new
# Debian 12 root (debootstrap --variant=minbase: no compiler, no CMake, no
# Python, nothing of dtrain's) holding a clone of this checkout's HEAD, with
# an empty ccache and no torch venv, so every package, wheel and compile is
# fetched and made again.
#
#   sudo bash scripts/fresh-root.sh demo [ROOT]   README command 1 (scripts/demo.sh)
#   sudo bash scripts/fresh-root.sh test [ROOT]   README command 2 (scripts/test.sh)
#   sudo bash scripts/fresh-root.sh ci   [ROOT]   .ci/run (command 2 with CI=true)
#
# demo and test see no CUDA toolkit (a fresh machine has none); ci gets the
# host's toolkit (DTRAIN_CUDA_HOME, default /usr/local/cuda) bind-mounted
# read-only, as CI's machine has it. The network is the host's (Debian's
# packages and PyPI). The root's /proc, /sys, /dev and /dev/pts are mounted
# in a private mount namespace, undone when the command ends. Output goes to
# <ROOT>/tmp/fresh-<command>.log; the last line is the command's wall time.
#
# Environment: DTRAIN_FRESH_BASE (a debootstrap root copied instead of making
# one: saves the minute debootstrap takes, which is not part of any
# measurement), DTRAIN_FRESH_MIRROR (default http://deb.debian.org/debian).
# The host's PIP_* settings, and the CA bundle PIP_CERT names, are carried
# in: they are this machine's network set-up, which a fresh machine here has.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
readonly WHAT="${1:-}"
readonly ROOT="${2:-/var/tmp/dtrain-fresh-$WHAT}"
readonly MIRROR="${DTRAIN_FRESH_MIRROR:-http://deb.debian.org/debian}"
CUDA="$(readlink -f "${DTRAIN_CUDA_HOME:-/usr/local/cuda}")"
readonly CUDA

log() { printf '==> fresh-root: %s\n' "$*"; }
die() {
  printf '==> fresh-root: ERROR: %s\n' "$*" >&2
  exit 1
}

case "$WHAT" in
  demo) CMD="bash scripts/demo.sh" ;;
  test) CMD="bash scripts/test.sh" ;;
  ci) CMD="bash .ci/run" ;;
  *) die "usage: scripts/fresh-root.sh demo|test|ci [ROOT]" ;;
esac
[[ "$(id -u)" == 0 ]] || die "needs root (debootstrap, mount, chroot)"
[[ ! -e "$ROOT" ]] || die "$ROOT exists: a fresh root must be new (remove it, or name another)"
[[ "$WHAT" != ci || -x "$CUDA/bin/nvcc" ]] || die "ci needs the CUDA toolkit at $CUDA (DTRAIN_CUDA_HOME)"

if [[ -n "${DTRAIN_FRESH_BASE:-}" ]]; then
  [[ -x "$DTRAIN_FRESH_BASE/bin/bash" ]] || die "DTRAIN_FRESH_BASE=$DTRAIN_FRESH_BASE is not a root"
  log "copying $DTRAIN_FRESH_BASE to $ROOT"
  cp -a "$DTRAIN_FRESH_BASE" "$ROOT"
else
  command -v debootstrap >/dev/null 2>&1 || die "debootstrap not found (apt-get install debootstrap)"
  log "making $ROOT (Debian 12 minbase)"
  debootstrap --variant=minbase bookworm "$ROOT" "$MIRROR"
fi
git clone -q --no-hardlinks "$REPO_ROOT" "$ROOT/src"
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
# What the installer of any Debian machine writes and debootstrap does not.
printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
  "$(hostname)" >"$ROOT/etc/hosts"
# The CA bundle goes beside the system's, which the root's ca-certificates
# package rewrites when apt-get installs it.
pip_env=()
while IFS= read -r line; do
  [[ "$line" == PIP_CERT=* ]] || pip_env+=("$line")
done < <(env | grep '^PIP_' || true)
if [[ -n "${PIP_CERT:-}" && -f "$PIP_CERT" ]]; then
  mkdir -p "$ROOT/etc/ssl"
  cp "$PIP_CERT" "$ROOT/etc/ssl/host-pip-ca.crt"
  pip_env+=(PIP_CERT=/etc/ssl/host-pip-ca.crt)
fi

log "running '$CMD' in $ROOT (log: $ROOT/tmp/fresh-$WHAT.log)"
# The mounts live in a private mount namespace: nothing to undo on the host.
unshare -m -- bash -s "$ROOT" "$WHAT" "$CUDA" "$CMD" "${pip_env[@]}" <<'EOF'
set -euo pipefail
root=$1 what=$2 cuda=$3 cmd=$4
shift 4
mount --make-rprivate /
# The root is a mount point of its own, as / is on a machine (Slurm's
# namespaced test runs `mount --make-rslave /`).
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"  # with /sys/fs/cgroup (slurmd needs it)
mount --rbind /dev "$root/dev"
if [[ $what == ci ]]; then
  mkdir -p "$root$cuda"
  mount --bind -o ro "$cuda" "$root$cuda"
  [[ -e $root/usr/local/cuda ]] || ln -s "$cuda" "$root/usr/local/cuda"
fi
path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
cuda_env=()
if [[ $what == ci ]]; then
  # As CI's machine (and this one) set up the toolkit: nvcc on PATH.
  path=/usr/local/cuda/bin:$path
  cuda_env=(CUDA_HOME=/usr/local/cuda LIBRARY_PATH=/usr/local/cuda/lib64/stubs)
fi
start=$(date +%s)
rc=0
chroot "$root" /usr/bin/env -i HOME=/root PATH="$path" LANG=C.UTF-8 "${cuda_env[@]}" "$@" \
  bash -c "cd /src && $cmd" >"$root/tmp/fresh-$what.log" 2>&1 || rc=$?
echo "==> fresh-root: '$cmd' exit $rc after $(($(date +%s) - start)) s" | tee -a "$root/tmp/fresh-$what.log"
exit $rc
EOF
