#!/usr/bin/env bash
# Rehearses scripts/gpu-check.sh here, short of the GPU: in a clean Debian 12
# root (debootstrap) holding only what the lent GPU machine has -- python3 with
# the torch 2.11 wheel, CMake, Ninja, g++ and the CUDA toolkit -- with no
# network (unshare -n) and no apt, so a package the build needs and
# .gpu-debs/ lacks fails here first. Needs root, debootstrap, the torch venv
# (scripts/torch-wheel.sh prepare) and .gpu-debs/ (scripts/gpu-check.sh download).
#
#   bash scripts/gpu-rehearse.sh [configure|all]   (default configure: unpack
#                                                  and configure; all also builds and tests)
#
# The root is made once (network, apt inside debootstrap only); the checkout,
# the toolkit and the venv's site-packages (as the root's python3
# dist-packages) are bind-mounted read-only; logs in <root>/tmp/out.
#
# Environment: DTRAIN_REHEARSE_ROOT (default /var/tmp/dtrain-gpu-root),
# DTRAIN_CUDA_HOME (default /usr/local/cuda), DTRAIN_TORCH_VENV (default
# /var/cache/dtrain/torch-2.11.0), DTRAIN_JOBS (default 1).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
readonly ROOT="${DTRAIN_REHEARSE_ROOT:-/var/tmp/dtrain-gpu-root}"
CUDA="$(readlink -f "${DTRAIN_CUDA_HOME:-/usr/local/cuda}")"
readonly CUDA
readonly VENV="${DTRAIN_TORCH_VENV:-/var/cache/dtrain/torch-2.11.0}"
readonly STEP="${1:-configure}"

log() { printf '==> gpu-rehearse: %s\n' "$*"; }
die() {
  printf '==> gpu-rehearse: ERROR: %s\n' "$*" >&2
  exit 1
}

[[ "$(id -u)" == 0 ]] || die "needs root (debootstrap, mount, chroot)"
[[ "$STEP" == configure || "$STEP" == all ]] || die "usage: scripts/gpu-rehearse.sh [configure|all]"
[[ -d "$REPO_ROOT/.gpu-debs" ]] || die "no .gpu-debs: run bash scripts/gpu-check.sh download first"
SITE="$(compgen -G "$VENV/lib/python3*/site-packages" | head -1)" || true
[[ -n "$SITE" && -d "$SITE/torch" ]] || die "no torch in $VENV: run bash scripts/torch-wheel.sh prepare first"
PY="$(basename "$(dirname "$SITE")")" # python3.11: the root's python3 must be the venv's

if [[ ! -x "$ROOT/usr/bin/cmake" ]]; then
  command -v debootstrap >/dev/null 2>&1 || die "debootstrap not found (apt-get install debootstrap)"
  log "making $ROOT (Debian 12 minbase + g++, cmake, ninja-build, python3)"
  debootstrap --variant=minbase --include=g++,cmake,ninja-build,python3 bookworm "$ROOT"
fi

mounts=()
bind() {
  mkdir -p "$ROOT$2"
  mount --bind -o ro "$1" "$ROOT$2"
  mounts=("$ROOT$2" "${mounts[@]}")
}
cleanup() {
  local m
  for m in "${mounts[@]}"; do umount "$m" || true; done
}
trap cleanup EXIT
bind "$REPO_ROOT" /src
bind "$CUDA" "$CUDA"
ln -sfn "$CUDA" "$ROOT/usr/local/cuda"
bind "$SITE" "/usr/local/lib/$PY/dist-packages"
mkdir -p "$ROOT/proc"
mount -t proc proc "$ROOT/proc"
mounts=("$ROOT/proc" "${mounts[@]}")

log "gpu-check.sh ${STEP/all/} in $ROOT, no network"
rc=0
# A network namespace of its own (no network), with its loopback up: the GPU
# machine has one, and the multi-process tests form their groups on it.
unshare -n sh -c 'ip link set lo up && exec chroot "$@"' sh "$ROOT" env -i PATH=/usr/local/cuda/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
  OUT=/tmp/out DTRAIN_GPU_BUILD=/tmp/build-gpu DTRAIN_GPU_PREFIX=/tmp/prefix \
  DTRAIN_JOBS="${DTRAIN_JOBS:-1}" DTRAIN_GPU_PYTHON=python3 DTRAIN_GPU_SKIP_BENCH=1 \
  bash /src/scripts/gpu-check.sh "${STEP/all/}" || rc=$?
log "exit $rc; logs in $ROOT/tmp/out"
exit "$rc"
