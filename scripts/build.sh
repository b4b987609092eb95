#!/usr/bin/env bash
# Configures and builds dtrain into build/ (Ninja, Release, ccache).
#
#   scripts/build.sh [EXTRA CMAKE -D OPTIONS...]
#
# Environment: DTRAIN_BUILD_DIR (default <repo>/build), DTRAIN_BUILD_TYPE
# (default Release), DTRAIN_JOBS (default nproc), CCACHE_DIR (default
# $HOME/.cache/dtrain-ccache; 5G at most).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
readonly BUILD_DIR="${DTRAIN_BUILD_DIR:-${REPO_ROOT}/build}"
readonly BUILD_TYPE="${DTRAIN_BUILD_TYPE:-Release}"
readonly JOBS="${DTRAIN_JOBS:-$(nproc)}"

log() { printf '==> build: %s\n' "$*"; }
die() { printf '==> build: ERROR: %s\n' "$*" >&2; exit 1; }

setup_ccache() {
  export CCACHE_DIR="${CCACHE_DIR:-${HOME:-/tmp}/.cache/dtrain-ccache}"
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
  local generator=()
  # An existing build dir keeps its generator; a new one uses Ninja.
  if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
    command -v ninja >/dev/null 2>&1 || die "ninja not found (scripts/install-deps.sh installs it)"
    generator=(-G Ninja)
  fi
  log "configure $BUILD_DIR ($BUILD_TYPE)"
  cmake -S "$REPO_ROOT" -B "$BUILD_DIR" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE="$BUILD_TYPE" -DDTRAIN_USE_CCACHE=ON "$@"
}

build() {
  log "build with $JOBS jobs"
  cmake --build "$BUILD_DIR" -j "$JOBS"
}

main() {
  command -v cmake >/dev/null 2>&1 || die "cmake not found (scripts/install-deps.sh installs it)"
  setup_ccache
  configure "$@"
  build
  if command -v ccache >/dev/null 2>&1; then
    log "ccache: $(ccache --show-stats 2>/dev/null | grep -Ei '^ *(hits|cache hit \(rate\))' | head -1 | tr -s ' ')"
  fi
  log "OK: $BUILD_DIR"
}

main "$@"
