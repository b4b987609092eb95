#!/usr/bin/env bash
# Builds dtrain against Debian 13 (trixie)'s LibTorch 2.6 and runs the unit
# tests there, so the LibTorch 2.x side of the compatibility header never rots.
#
#   scripts/trixie.sh            prepare the root (cached), build, ctest -L unit
#   scripts/trixie.sh prepare    only make sure the trixie root is ready
#   scripts/trixie.sh shell [CMD...]
#                                run CMD (default: bash) in the root, with the
#                                source at /src (read-only) and the build at /build
#
# The root is made once with debootstrap (minbase) and reused: a stamp file
# marks a complete bootstrap, and the package set is checked with dpkg-query on
# every run (missing packages are installed, a broken root is rebuilt).
#
# Environment:
#   DTRAIN_TRIXIE_ROOT    the chroot            (default /var/cache/dtrain/trixie)
#   DTRAIN_TRIXIE_BUILD   build dir, at /build  (default <root>-build)
#   DTRAIN_TRIXIE_CCACHE  ccache dir, at /ccache (default <root>-ccache)
#   DTRAIN_TRIXIE_SRC     source tree, at /src  (default: this repository)
#   DTRAIN_TRIXIE_MIRROR  Debian mirror         (default http://deb.debian.org/debian)
#   DTRAIN_TRIXIE_CTEST_ARGS  ctest selection   (default "-L unit")
#   DTRAIN_TRIXIE_TIMEOUT per-test timeout, s   (default 300)
#   DTRAIN_TRIXIE_CTEST_TIMEOUT  limit for the whole ctest run, s (default 1200)
#   DTRAIN_JOBS           parallel jobs         (default nproc)
#   DTRAIN_SKIP_TRIXIE=1  skip (exit 0) when the stage cannot run here
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
readonly TRIXIE_ROOT="${DTRAIN_TRIXIE_ROOT:-/var/cache/dtrain/trixie}"
readonly TRIXIE_BUILD="${DTRAIN_TRIXIE_BUILD:-${TRIXIE_ROOT}-build}"
readonly TRIXIE_CCACHE="${DTRAIN_TRIXIE_CCACHE:-${TRIXIE_ROOT}-ccache}"
readonly TRIXIE_SRC="${DTRAIN_TRIXIE_SRC:-${REPO_ROOT}}"
readonly MIRROR="${DTRAIN_TRIXIE_MIRROR:-http://deb.debian.org/debian}"
readonly JOBS="${DTRAIN_JOBS:-$(nproc)}"
readonly CTEST_ARGS="${DTRAIN_TRIXIE_CTEST_ARGS:--L unit}"
readonly TEST_TIMEOUT="${DTRAIN_TRIXIE_TIMEOUT:-300}"
readonly CTEST_TIMEOUT="${DTRAIN_TRIXIE_CTEST_TIMEOUT:-1200}"
readonly STAMP="${TRIXIE_ROOT}/.dtrain-bootstrap-complete"

# What the build needs inside trixie. libtorch-dev 2.6's CMake config also
# wants the -dev packages it depends on; they come in as Depends.
# libjpeg62-turbo-dev: libturbojpeg0-dev's CMake config refers to its files.
# prometheus-cpp-dev: src/observe's /metrics endpoint.
readonly PACKAGES=(
  build-essential cmake ninja-build ccache
  libtorch-dev libgloo-dev libcli11-dev nlohmann-json3-dev prometheus-cpp-dev
  libgtest-dev libgmock-dev zlib1g-dev libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev
)

CURRENT_STAGE="start"
STAGE_START=$SECONDS
MOUNTS=()

log() { printf '==> trixie: %s\n' "$*"; }
die() { printf '==> trixie: ERROR: %s\n' "$*" >&2; exit 1; }

stage() {
  log "stage: $1 (previous stage took $((SECONDS - STAGE_START))s)"
  CURRENT_STAGE="$1"
  STAGE_START=$SECONDS
}

# Exits 0 with a message when DTRAIN_SKIP_TRIXIE=1, otherwise fails with $1.
cannot_run() {
  if [[ "${DTRAIN_SKIP_TRIXIE:-0}" == 1 ]]; then
    log "SKIPPED: $1 (DTRAIN_SKIP_TRIXIE=1)"
    exit 0
  fi
  die "$1; set DTRAIN_SKIP_TRIXIE=1 to skip this stage"
}

# debootstrap, mount and chroot need root: re-run under sudo when possible.
ensure_root() {
  [[ "$(id -u)" == 0 ]] && return 0
  command -v sudo >/dev/null 2>&1 || cannot_run "needs root (debootstrap, mount, chroot) and sudo is not installed"
  if ! sudo -n true 2>/dev/null && [[ ! -t 0 ]]; then
    cannot_run "needs root (debootstrap, mount, chroot) and sudo asks for a password without a terminal"
  fi
  log "re-running as root through sudo"
  exec sudo env \
    DTRAIN_TRIXIE_ROOT="$TRIXIE_ROOT" DTRAIN_TRIXIE_BUILD="$TRIXIE_BUILD" \
    DTRAIN_TRIXIE_CCACHE="$TRIXIE_CCACHE" DTRAIN_TRIXIE_SRC="$TRIXIE_SRC" \
    DTRAIN_TRIXIE_MIRROR="$MIRROR" DTRAIN_JOBS="$JOBS" \
    DTRAIN_TRIXIE_CTEST_ARGS="$CTEST_ARGS" DTRAIN_TRIXIE_TIMEOUT="$TEST_TIMEOUT" \
    DTRAIN_TRIXIE_CTEST_TIMEOUT="$CTEST_TIMEOUT" \
    DTRAIN_SKIP_TRIXIE="${DTRAIN_SKIP_TRIXIE:-0}" \
    bash "${BASH_SOURCE[0]}" "$@"
}

check_tools() {
  command -v debootstrap >/dev/null 2>&1 || cannot_run "debootstrap is not installed (scripts/install-deps.sh installs it)"
  [[ -e /usr/share/debootstrap/scripts/trixie ]] || cannot_run "this debootstrap does not know trixie"
  command -v chroot >/dev/null 2>&1 || cannot_run "chroot is not available"
}

# One run at a time per root: a second run would mount its tree over ours.
take_lock() {
  mkdir -p "$(dirname "$TRIXIE_ROOT")"
  exec 9>"${TRIXIE_ROOT}.lock"
  if ! flock -n 9; then
    log "waiting for another run using $TRIXIE_ROOT"
    flock -w 3600 9 || die "timed out waiting for ${TRIXIE_ROOT}.lock"
  fi
}

# ---- mounts -----------------------------------------------------------------

# mount_into TARGET MOUNT-ARGS...: mounts and records TARGET for unmounting.
mount_into() {
  local target="$1"
  shift
  mkdir -p "$target"
  mount "$@" "$target"
  MOUNTS+=("$target")
}

unmount_all() {
  local i
  for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
    umount "${MOUNTS[i]}" 2>/dev/null || umount -l "${MOUNTS[i]}" 2>/dev/null ||
      printf '==> trixie: WARNING: could not unmount %s\n' "${MOUNTS[i]}" >&2
  done
  MOUNTS=()
}

# Everything still mounted below the root (e.g. left by a killed earlier run).
stale_mounts() {
  findmnt -rn -o TARGET | awk -v root="$TRIXIE_ROOT" 'index($0, root "/") == 1' | sort -r
}

unmount_stale() {
  local m
  while read -r m; do
    [[ -n "$m" ]] || continue
    log "unmounting stale $m"
    umount "$m" 2>/dev/null || umount -l "$m"
  done < <(stale_mounts)
}

mount_system() {
  mount_into "$TRIXIE_ROOT/proc" -t proc proc
  mount_into "$TRIXIE_ROOT/dev" --bind /dev
  mount_into "$TRIXIE_ROOT/dev/pts" --bind /dev/pts
  mount_into "$TRIXIE_ROOT/dev/shm" -t tmpfs -o mode=1777,nosuid,nodev tmpfs
  cp -L /etc/resolv.conf "$TRIXIE_ROOT/etc/resolv.conf" 2>/dev/null || true
  cp -L /etc/hosts "$TRIXIE_ROOT/etc/hosts" 2>/dev/null || true
}

mount_work() {
  [[ -f "$TRIXIE_SRC/CMakeLists.txt" ]] || die "no CMakeLists.txt in $TRIXIE_SRC"
  mkdir -p "$TRIXIE_BUILD" "$TRIXIE_CCACHE"
  mount_into "$TRIXIE_ROOT/src" --bind "$TRIXIE_SRC"
  mount -o remount,bind,ro "$TRIXIE_ROOT/src"
  mount_into "$TRIXIE_ROOT/build" --bind "$TRIXIE_BUILD"
  mount_into "$TRIXIE_ROOT/ccache" --bind "$TRIXIE_CCACHE"
}

on_exit() {
  local rc=$?
  unmount_all
  if [[ $rc -ne 0 ]]; then
    printf '==> trixie: FAILED in stage "%s" (exit %d)\n' "$CURRENT_STAGE" "$rc" >&2
  fi
  exit "$rc"
}

# ---- the root -----------------------------------------------------------------

in_root() {
  chroot "$TRIXIE_ROOT" /usr/bin/env -i \
    HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" DEBIAN_FRONTEND=noninteractive \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    CCACHE_DIR=/ccache CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime \
    "$@"
}

root_is_healthy() {
  [[ -f "$STAMP" ]] && [[ -x "$TRIXIE_ROOT/usr/bin/apt-get" ]] &&
    chroot "$TRIXIE_ROOT" /bin/true 2>/dev/null &&
    grep -q '^13\|trixie' "$TRIXIE_ROOT/etc/debian_version" 2>/dev/null
}

wipe_root() {
  unmount_stale
  if [[ -n "$(stale_mounts)" ]]; then
    die "cannot remove $TRIXIE_ROOT: still mounted: $(stale_mounts | tr '\n' ' ')"
  fi
  case "$TRIXIE_ROOT" in
    / | /usr | /var | /var/cache | "") die "refusing to remove '$TRIXIE_ROOT'" ;;
  esac
  rm -rf --one-file-system "$TRIXIE_ROOT"
}

bootstrap_root() {
  stage "debootstrap trixie into $TRIXIE_ROOT"
  if [[ -e "$TRIXIE_ROOT" ]]; then
    log "existing root is incomplete or broken: rebuilding it"
    wipe_root
  fi
  mkdir -p "$(dirname "$TRIXIE_ROOT")"
  local cache="${TRIXIE_ROOT}-debs"
  mkdir -p "$cache"
  debootstrap --variant=minbase --merged-usr --cache-dir="$cache" \
    --include=ca-certificates trixie "$TRIXIE_ROOT" "$MIRROR"
  # Faster, smaller package installs: no fsync, no docs, no daemons.
  printf 'force-unsafe-io\n' >"$TRIXIE_ROOT/etc/dpkg/dpkg.cfg.d/dtrain-unsafe-io"
  printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
    'path-exclude /usr/share/man/*' 'path-exclude /usr/share/locale/*' \
    >"$TRIXIE_ROOT/etc/dpkg/dpkg.cfg.d/dtrain-nodoc"
  printf '%s\n' 'APT::Install-Recommends "false";' 'Acquire::Languages "none";' \
    >"$TRIXIE_ROOT/etc/apt/apt.conf.d/90dtrain"
  printf '#!/bin/sh\nexit 101\n' >"$TRIXIE_ROOT/usr/sbin/policy-rc.d"
  chmod 755 "$TRIXIE_ROOT/usr/sbin/policy-rc.d"
  printf 'deb %s trixie main\n' "$MIRROR" >"$TRIXIE_ROOT/etc/apt/sources.list"
  date -u +%FT%TZ >"$STAMP"
}

missing_packages() {
  local p status
  for p in "${PACKAGES[@]}"; do
    # shellcheck disable=SC2016 # dpkg-query format, not a shell expansion
    status="$(in_root dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)"
    [[ "$status" == installed ]] || printf '%s\n' "$p"
  done
}

install_packages() {
  local missing
  mapfile -t missing < <(missing_packages)
  if [[ ${#missing[@]} -eq 0 && -z "$(in_root dpkg --audit 2>&1)" ]]; then
    log "all ${#PACKAGES[@]} packages already installed in the root"
    return 0
  fi
  stage "install packages in the trixie root"
  log "installing: ${missing[*]:-(repairing dpkg state)}"
  in_root dpkg --configure -a
  in_root apt-get update -q
  in_root apt-get install -y -q --no-install-recommends "${PACKAGES[@]}"
}

prepare_root() {
  stage "check trixie root"
  unmount_stale
  if ! root_is_healthy; then
    bootstrap_root
  else
    log "reusing $TRIXIE_ROOT (bootstrapped $(cat "$STAMP"))"
  fi
  mount_system
  install_packages
  # shellcheck disable=SC2016 # dpkg-query format, not a shell expansion
  log "LibTorch in the root: $(in_root dpkg-query -W -f='${Version}' libtorch-dev)"
}

# ---- build and test --------------------------------------------------------------

configure_and_build() {
  stage "configure (LibTorch 2.6, trixie)"
  in_root ccache --max-size=2G >/dev/null
  in_root cmake -S /src -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DDTRAIN_BUILD_BENCH=OFF -DDTRAIN_USE_CCACHE=ON
  stage "build (LibTorch 2.6, trixie)"
  in_root cmake --build /build -j "$JOBS"
}

run_tests() {
  stage "ctest $CTEST_ARGS (LibTorch 2.6, trixie)"
  local args
  read -r -a args <<<"$CTEST_ARGS"
  in_root timeout --kill-after=30 "$CTEST_TIMEOUT" \
    ctest --test-dir /build --output-on-failure --no-tests=error -j "$JOBS" \
    --timeout "$TEST_TIMEOUT" "${args[@]}"
}

main() {
  local cmd="${1:-all}"
  [[ $# -gt 0 ]] && shift
  case "$cmd" in
    all | prepare | shell) ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
      return 0
      ;;
    *) die "unknown command '$cmd' (all, prepare, shell)" ;;
  esac
  ensure_root "$cmd" "$@"
  check_tools
  take_lock
  trap on_exit EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  prepare_root
  case "$cmd" in
    prepare) ;;
    shell)
      mount_work
      stage "shell"
      [[ $# -gt 0 ]] || set -- bash
      in_root bash -c 'cd /build && exec "$@"' shell "$@"
      ;;
    all)
      mount_work
      configure_and_build
      run_tests
      ;;
  esac
  CURRENT_STAGE="done"
  log "OK (last stage took $((SECONDS - STAGE_START))s, ${SECONDS}s in all)"
}

main "$@"
