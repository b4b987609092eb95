#!/usr/bin/env bash
# Configures and builds dtrain into build/ (Ninja, Release, ccache).
#
#   scripts/build.sh [EXTRA CMAKE -D OPTIONS...]
#
# The LibTorch (DTRAIN_TORCH):
#   auto    (default) PyPI's torch wheel 2.11.0, set up by
#           scripts/torch-wheel.sh in a cached venv: with the CUDA toolkit the
#           CUDA build, without it the wheel's CPU library only. Where the
#           wheel cannot be set up (no network, no python3-venv, a version
#           PyPI lacks) and Debian's LibTorch is installed, the 1.13 build
#           instead, with one line saying why; otherwise that line and exit 1.
#   wheel   the torch wheel or fail (one line naming the cause); CI=true
#           makes auto mean this
#   system  the 1.13 build: Debian 12's libtorch-dev, for offline machines
# A build dir configured for another LibTorch is reconfigured from scratch
# (its CMakeCache.txt is removed; ccache keeps the rebuild short).
#
# Environment: DTRAIN_BUILD_DIR (default <repo>/build), DTRAIN_BUILD_TYPE
# (default Release), DTRAIN_JOBS (default nproc), DTRAIN_BUILD_TARGETS (default
# all; e.g. "dtrain" for only the program), DTRAIN_REQUIRE_CUDA=1 (the CUDA
# build or fail: CI's), CCACHE_DIR (default: the wheel's
# <cache>/torch-<version>-ccache, or $HOME/.cache/dtrain-ccache for the 1.13
# build; 5G at most), DTRAIN_NICE (nice level of the build, default 0),
# DTRAIN_SYSTEM_TORCH_DIR (Debian's TorchConfig.cmake folder, default
# /usr/lib/x86_64-linux-gnu/cmake/Torch), DTRAIN_INSTALL=1 (install
# libtorch-dev when the fallback needs it; scripts/demo.sh sets it),
# DTRAIN_TORCH_* and DTRAIN_CUDA_HOME
# (scripts/torch-wheel.sh's header).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
readonly BUILD_DIR="${DTRAIN_BUILD_DIR:-${REPO_ROOT}/build}"
readonly BUILD_TYPE="${DTRAIN_BUILD_TYPE:-Release}"
readonly JOBS="${DTRAIN_JOBS:-$(nproc)}"
readonly NICE="${DTRAIN_NICE:-0}"
TORCH_MODE="${DTRAIN_TORCH:-auto}"

log() { printf '==> build: %s\n' "$*"; }
die() {
  printf '==> build: ERROR: %s\n' "$*" >&2
  exit 1
}

# Debian's LibTorch 1.13 (libtorch-dev), the 1.13 build's.
readonly SYSTEM_TORCH_DIR="${DTRAIN_SYSTEM_TORCH_DIR:-/usr/lib/x86_64-linux-gnu/cmake/Torch}"
have_debian_libtorch() {
  [[ -f "$SYSTEM_TORCH_DIR/TorchConfig.cmake" ]]
}

TORCH_ARGS=() # CMake arguments for the chosen LibTorch
TORCH_KEY=""  # what the build dir is configured for

# Fills TORCH_ARGS for the torch wheel; returns 3 with the cause in $1's file
# when the wheel cannot be set up here.
wheel_args() {
  local cause_file="$1" out rc=0
  out="$(mktemp)"
  if [[ "${DTRAIN_REQUIRE_CUDA:-0}" == 1 ]]; then
    export DTRAIN_TORCH_CUDA=1
  fi
  DTRAIN_TORCH_CAUSE_FILE="$cause_file" bash "$REPO_ROOT/scripts/torch-wheel.sh" cmake-args >"$out" || rc=$?
  if [[ $rc -eq 0 ]]; then
    mapfile -t TORCH_ARGS <"$out"
    TORCH_KEY="wheel ${TORCH_ARGS[*]}"
  fi
  rm -f "$out"
  return "$rc"
}

choose_torch() {
  case "$TORCH_MODE" in
    auto | wheel | system) ;;
    *) die "DTRAIN_TORCH must be auto, wheel or system, not '$TORCH_MODE'" ;;
  esac
  if [[ "$TORCH_MODE" == auto && "${CI:-}" == true ]]; then
    TORCH_MODE=wheel
  fi
  if [[ "$TORCH_MODE" != system ]]; then
    local cause_file rc=0 cause
    cause_file="$(mktemp)"
    wheel_args "$cause_file" || rc=$?
    cause="$(cat "$cause_file")"
    rm -f "$cause_file"
    [[ $rc -eq 0 ]] && return 0
    [[ $rc -eq 3 ]] || die "scripts/torch-wheel.sh failed (exit $rc; see above)"
    if [[ "$TORCH_MODE" == wheel ]]; then
      die "$cause; the fallback, the 1.13 build (DTRAIN_TORCH=system), is off under DTRAIN_TORCH=wheel or CI=true"
    fi
    if ! have_debian_libtorch && [[ "${DTRAIN_INSTALL:-0}" == 1 ]]; then
      log "$cause: installing Debian's libtorch-dev for the fallback, the 1.13 build"
      bash "$REPO_ROOT/scripts/install-deps.sh" libtorch-dev ||
        die "$cause; the fallback, the 1.13 build, needs Debian's libtorch-dev, which apt-get could not install"
    fi
    have_debian_libtorch ||
      die "$cause; the fallback, the 1.13 build, needs Debian's libtorch-dev (apt-get install libtorch-dev)"
    log "$cause: taking the fallback, the 1.13 build (Debian's LibTorch; DTRAIN_TORCH=system chooses it directly)"
    TORCH_MODE=system
  fi
  have_debian_libtorch || die "DTRAIN_TORCH=system: Debian's LibTorch is not installed (apt-get install libtorch-dev)"
  [[ "${DTRAIN_REQUIRE_CUDA:-0}" != 1 ]] || die "DTRAIN_REQUIRE_CUDA=1: Debian's LibTorch 1.13 has no CUDA"
  TORCH_ARGS=(-DDTRAIN_TORCH_CPU_ONLY=OFF "-DTorch_DIR=$SYSTEM_TORCH_DIR")
  TORCH_KEY="system $SYSTEM_TORCH_DIR"
}

setup_ccache() {
  if [[ -z "${CCACHE_DIR:-}" ]]; then
    if [[ "$TORCH_KEY" == wheel* ]]; then
      CCACHE_DIR="$(bash "$REPO_ROOT/scripts/torch-wheel.sh" ccache-dir)"
    else
      CCACHE_DIR="${HOME:-/tmp}/.cache/dtrain-ccache"
    fi
  fi
  export CCACHE_DIR
  # Without pch_defines,time_macros ccache refuses every compile that uses the
  # precompiled LibTorch header ("could not use precompiled header").
  export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
  # Paths relative to the checkout, so another checkout (a git worktree) of
  # the same sources hits the same cache entries.
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$REPO_ROOT}"
  if command -v ccache >/dev/null 2>&1; then
    mkdir -p "$CCACHE_DIR"
    ccache --max-size=5G >/dev/null
  else
    log "ccache not found: building without it"
  fi
}

configure() {
  local generator=() stamp="$BUILD_DIR/.dtrain-torch"
  # A build dir configured for another LibTorch starts again: CMake would keep
  # the cached Torch_DIR and library paths of the old one.
  if [[ -f "$BUILD_DIR/CMakeCache.txt" ]] && [[ ! -f "$stamp" || "$(cat "$stamp")" != "$TORCH_KEY" ]]; then
    log "$BUILD_DIR was configured for another LibTorch: configuring it from scratch"
    rm -rf "$BUILD_DIR/CMakeCache.txt" "$BUILD_DIR/CMakeFiles"
  fi
  # An existing build dir keeps its generator; a new one uses Ninja.
  if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
    command -v ninja >/dev/null 2>&1 || die "ninja not found (scripts/install-deps.sh installs it)"
    generator=(-G Ninja)
  fi
  local require_cuda=OFF
  [[ "${DTRAIN_REQUIRE_CUDA:-0}" == 1 ]] && require_cuda=ON
  log "configure $BUILD_DIR ($BUILD_TYPE, $([[ "$TORCH_KEY" == system* ]] && echo "Debian's LibTorch 1.13" || echo "torch wheel"))"
  nice -n "$NICE" cmake -S "$REPO_ROOT" -B "$BUILD_DIR" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE="$BUILD_TYPE" -DDTRAIN_USE_CCACHE=ON -DDTRAIN_REQUIRE_CUDA="$require_cuda" \
    "${TORCH_ARGS[@]}" "$@"
  mkdir -p "$BUILD_DIR"
  printf '%s\n' "$TORCH_KEY" >"$stamp"
}

build() {
  local targets=()
  read -r -a targets <<<"${DTRAIN_BUILD_TARGETS:-}"
  log "build ${targets[*]:-all targets} with $JOBS jobs"
  if [[ ${#targets[@]} -gt 0 ]]; then
    nice -n "$NICE" cmake --build "$BUILD_DIR" -j "$JOBS" --target "${targets[@]}"
  else
    nice -n "$NICE" cmake --build "$BUILD_DIR" -j "$JOBS"
  fi
}

# CI's CUDA build: proof that the NCCL path was compiled, not only configured
# (the process group refers to c10d::ProcessGroupNCCL only under
# DTRAIN_HAVE_NCCL). grep -c reads all of nm's output: grep -q would end the
# pipe early and pipefail would report nm's SIGPIPE.
check_nccl_compiled() {
  local lib="$BUILD_DIR/src/comm/libdtrain_comm.a" refs
  [[ -f "$lib" ]] || return 0
  refs="$(nm -C "$lib" | grep -c 'c10d::ProcessGroupNCCL::ProcessGroupNCCL' || true)"
  [[ "$refs" -gt 0 ]] ||
    die "libdtrain_comm.a does not refer to c10d::ProcessGroupNCCL: the NCCL path was not compiled"
  log "NCCL path compiled: libdtrain_comm.a refers to c10d::ProcessGroupNCCL"
}

main() {
  command -v cmake >/dev/null 2>&1 || die "cmake not found (scripts/install-deps.sh installs it)"
  choose_torch
  setup_ccache
  configure "$@"
  build
  [[ "${DTRAIN_REQUIRE_CUDA:-0}" != 1 ]] || check_nccl_compiled
  if command -v ccache >/dev/null 2>&1; then
    log "ccache: $(ccache --show-stats 2>/dev/null | grep -Ei '^ *(hits|cache hit \(rate\))' | head -1 | tr -s ' ')"
  fi
  local v="$BUILD_DIR/generated/dtrain/version.h"
  [[ -f "$v" ]] || return 0
  log "OK: $BUILD_DIR (LibTorch $(sed -n 's/^#define DTRAIN_LIBTORCH_VERSION "\(.*\)"/\1/p' "$v") ($(sed -n 's/^#define DTRAIN_TORCH_ORIGIN "\(.*\)"/\1/p' "$v")))"
}

main "$@"
