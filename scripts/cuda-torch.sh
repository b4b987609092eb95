#!/usr/bin/env bash
# Builds dtrain against a CUDA LibTorch 2.x -- the CMake package of PyPI's
# `torch` wheel (2.11.0, CUDA 13) -- with the CUDA toolkit at /usr/local/cuda,
# so that every CUDA and NCCL code path compiles and links in every CI run,
# then runs the unit tests against that LibTorch on the CPU (no GPU needed).
#
#   scripts/cuda-torch.sh            prepare the venv (cached), configure, build, ctest -L unit
#   scripts/cuda-torch.sh prepare    only make sure the venv is ready
#   scripts/cuda-torch.sh env        print the CMake arguments this stage uses
#
# The wheel is installed with --no-deps into a venv outside the repository,
# with only the runtime wheels whose libraries libtorch_cuda.so needs and the
# toolkit lacks (see EXTRA_WHEELS); everything else (cudart, cuBLAS, cuDNN,
# NCCL, ...) comes from the toolkit. A stamp file marks a complete venv; a venv
# for another wheel set, or a broken one, is rebuilt. pip takes its index from
# the machine's own pip configuration. Torch itself is never imported (its
# Python dependencies are not installed): the CMake prefix is found with
# importlib's find_spec, which is what torch.utils.cmake_prefix_path returns.
#
# Environment:
#   DTRAIN_TORCH_VERSION   the torch wheel        (default 2.11.0)
#   DTRAIN_TORCH_CACHE     cache root             (default /var/cache/dtrain when
#                                                  writable, else ~/.cache/dtrain)
#   DTRAIN_TORCH_VENV      the venv               (default <cache>/torch-<version>)
#   DTRAIN_TORCH_BUILD     build dir              (default <cache>/torch-<version>-build/<checkout>)
#   DTRAIN_TORCH_CCACHE    ccache dir             (default <cache>/torch-<version>-ccache)
#   DTRAIN_TORCH_PYTHON    Python for the venv    (default python3; needs a wheel for it)
#   DTRAIN_TORCH_FIND_LINKS  a folder of wheels pip looks in first (e.g. a
#                          pre-downloaded torch wheel), optional
#   DTRAIN_CUDA_HOME       CUDA toolkit           (default /usr/local/cuda)
#   DTRAIN_TORCH_CUDA_ARCH_LIST  TORCH_CUDA_ARCH_LIST (default 9.0, Hopper)
#   DTRAIN_TORCH_SRC       source tree            (default: this repository)
#   DTRAIN_TORCH_CTEST_ARGS  ctest selection      (default "-L unit")
#   DTRAIN_TORCH_TIMEOUT   per-test timeout, s    (default 300)
#   DTRAIN_TORCH_CTEST_TIMEOUT  limit for the whole ctest run, s (default 1200)
#   DTRAIN_JOBS            parallel jobs          (default nproc)
#   DTRAIN_NICE            nice level for the build and tests (default 0)
#   DTRAIN_SKIP_CUDA_TORCH=1  skip (exit 0) when the stage cannot run here (no
#                          toolkit, no venv module, no index) instead of failing
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
readonly TORCH_VERSION="${DTRAIN_TORCH_VERSION:-2.11.0}"
default_cache() {
  if mkdir -p /var/cache/dtrain 2>/dev/null && [[ -w /var/cache/dtrain ]]; then
    printf '/var/cache/dtrain'
  else
    printf '%s/dtrain' "${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}"
  fi
}
CACHE="${DTRAIN_TORCH_CACHE:-$(default_cache)}"
readonly CACHE
readonly VENV="${DTRAIN_TORCH_VENV:-${CACHE}/torch-${TORCH_VERSION}}"
readonly SRC="${DTRAIN_TORCH_SRC:-${REPO_ROOT}}"
# One build dir per checkout, so two checkouts never fight over one CMakeCache.
BUILD="${DTRAIN_TORCH_BUILD:-${CACHE}/torch-${TORCH_VERSION}-build/$(printf '%s' "$SRC" | md5sum | cut -c1-12)}"
readonly BUILD
readonly CCACHE="${DTRAIN_TORCH_CCACHE:-${CACHE}/torch-${TORCH_VERSION}-ccache}"
readonly PYTHON="${DTRAIN_TORCH_PYTHON:-python3}"
readonly FIND_LINKS="${DTRAIN_TORCH_FIND_LINKS:-}"
readonly CUDA_HOME="${DTRAIN_CUDA_HOME:-/usr/local/cuda}"
readonly ARCH_LIST="${DTRAIN_TORCH_CUDA_ARCH_LIST:-9.0}"
readonly CTEST_ARGS="${DTRAIN_TORCH_CTEST_ARGS:--L unit}"
readonly TEST_TIMEOUT="${DTRAIN_TORCH_TIMEOUT:-300}"
readonly CTEST_TIMEOUT="${DTRAIN_TORCH_CTEST_TIMEOUT:-1200}"
readonly JOBS="${DTRAIN_JOBS:-$(nproc)}"
readonly NICE="${DTRAIN_NICE:-0}"

# Wheels for the libraries that the torch wheel's libtorch_cuda.so /
# libtorch_nvshmem.so load (DT_NEEDED) and the toolkit does not carry; the
# versions are the ones torch 2.11.0's metadata pins (Requires-Dist, and
# cuda-toolkit 13.0.2's `cufile` extra). The toolkit, made from the other
# NVIDIA wheels torch pins (see $CUDA_HOME/dist-info), provides the rest.
# libcuda.so.1, the driver, is needed only by libcaffe2_nvrtc.so, which
# LibTorch opens on first use of a GPU; nothing links it.
#   libcusparseLt.so.0    nvidia-cusparselt-cu13
#   libnvshmem_host.so.3  nvidia-nvshmem-cu13
#   libcufile.so.0        nvidia-cufile
# Without them the link of every executable fails (ld resolves a shared
# library's DT_NEEDED entries) and so does loading libtorch_cuda.so.
extra_wheels() {
  case "$TORCH_VERSION" in
    2.11.0) printf '%s\n' nvidia-cusparselt-cu13==0.8.0 nvidia-nvshmem-cu13==3.4.5 'nvidia-cufile==1.15.1.6.*' ;;
    *) die "no extra-wheel list for torch $TORCH_VERSION: read its Requires-Dist (pip show -v, METADATA) and add one here" ;;
  esac
}

CURRENT_STAGE="start"
STAGE_START=$SECONDS

log() { printf '==> cuda-torch: %s\n' "$*"; }
die() { printf '==> cuda-torch: ERROR: %s\n' "$*" >&2; exit 1; }

stage() {
  log "stage: $1 (previous stage took $((SECONDS - STAGE_START))s)"
  CURRENT_STAGE="$1"
  STAGE_START=$SECONDS
}

# Exits 0 with a message when DTRAIN_SKIP_CUDA_TORCH=1, otherwise fails with $1.
cannot_run() {
  if [[ "${DTRAIN_SKIP_CUDA_TORCH:-0}" == 1 ]]; then
    log "SKIPPED: $1 (DTRAIN_SKIP_CUDA_TORCH=1)"
    exit 0
  fi
  die "$1; set DTRAIN_SKIP_CUDA_TORCH=1 to skip this stage"
}

on_exit() {
  local rc=$?
  if [[ $rc -ne 0 ]]; then
    printf '==> cuda-torch: FAILED in stage "%s" (exit %d)\n' "$CURRENT_STAGE" "$rc" >&2
  fi
  exit "$rc"
}

check_tools() {
  [[ -x "$CUDA_HOME/bin/nvcc" ]] ||
    cannot_run "no CUDA toolkit at $CUDA_HOME (nvcc missing); set DTRAIN_CUDA_HOME"
  [[ -f "$CUDA_HOME/include/nccl.h" ]] ||
    cannot_run "no nccl.h in $CUDA_HOME/include: the toolkit lacks NCCL"
  command -v "$PYTHON" >/dev/null 2>&1 || cannot_run "$PYTHON not found; set DTRAIN_TORCH_PYTHON"
  "$PYTHON" -c 'import venv, ensurepip' 2>/dev/null ||
    cannot_run "$PYTHON cannot make a venv (apt-get install python3-venv)"
  local tool
  for tool in cmake ninja ccache nm; do
    command -v "$tool" >/dev/null 2>&1 || cannot_run "$tool not found (scripts/install-deps.sh installs it)"
  done
}

# One run at a time per venv: a second run would rebuild it under the first.
take_lock() {
  mkdir -p "$(dirname "$VENV")"
  exec 9>"${VENV}.lock"
  if ! flock -n 9; then
    log "waiting for another run using $VENV"
    flock -w 3600 9 || die "timed out waiting for ${VENV}.lock"
  fi
}

# ---- the venv -------------------------------------------------------------------

# What a complete venv holds; a different stamp means "rebuild".
wanted_stamp() {
  printf 'torch==%s %s python=%s\n' "$TORCH_VERSION" "$(extra_wheels | tr '\n' ' ')" \
    "$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
}

# The torch package directory (torch.utils.cmake_prefix_path is <it>/share/cmake).
torch_dir() {
  "$VENV/bin/python" -c 'import importlib.util, os
spec = importlib.util.find_spec("torch")
print(os.path.dirname(spec.origin) if spec and spec.origin else "")'
}

venv_is_healthy() {
  [[ -f "$VENV/.dtrain-complete" ]] && [[ "$(cat "$VENV/.dtrain-complete")" == "$(wanted_stamp)" ]] &&
    "$VENV/bin/python" -c 'pass' 2>/dev/null &&
    [[ -f "$(torch_dir)/share/cmake/Torch/TorchConfig.cmake" ]]
}

# Every DT_NEEDED library of the torch wheel's libraries must resolve, except
# the driver (see extra_wheels).
check_torch_libraries() {
  local lib missing=()
  for lib in "$1"/lib/libtorch*.so "$1"/lib/libc10*.so; do
    [[ "$lib" == */libcaffe2_nvrtc.so ]] && continue
    while read -r so; do
      missing+=("$so (needed by ${lib##*/})")
    done < <(LD_LIBRARY_PATH="$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$lib" |
      awk '/not found/ && $1 != "libcuda.so.1" {print $1}')
  done
  [[ ${#missing[@]} -eq 0 ]] || die "libraries not found: ${missing[*]}; add the wheel that ships them to extra_wheels"
}

prepare_venv() {
  stage "check torch $TORCH_VERSION venv"
  if venv_is_healthy; then
    log "reusing $VENV (torch $TORCH_VERSION, made $(stat -c %y "$VENV/.dtrain-complete" | cut -d. -f1))"
  else
    stage "make torch $TORCH_VERSION venv in $VENV"
    case "$VENV" in
      / | /usr | /var | /var/cache | "$HOME" | "") die "refusing to remove '$VENV'" ;;
    esac
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    local pip=("$VENV/bin/python" -m pip install --no-deps --no-input --progress-bar off)
    [[ -n "$FIND_LINKS" ]] && pip+=(--find-links "$FIND_LINKS")
    local extras
    mapfile -t extras < <(extra_wheels)
    "${pip[@]}" "torch==$TORCH_VERSION" "${extras[@]}" ||
      cannot_run "pip could not install torch==$TORCH_VERSION (no index reachable? no wheel for $("$PYTHON" --version)?)"
    wanted_stamp >"$VENV/.dtrain-complete"
  fi
  local tdir
  tdir="$(torch_dir)"
  [[ -n "$tdir" ]] || die "torch is not importable from $VENV"
  check_torch_libraries "$tdir"
  log "torch $TORCH_VERSION at $tdir"
}

# ---- build and test ---------------------------------------------------------------

cmake_args() {
  local tdir="$1"
  # <torch> first so that TorchConfig's find_library(torch c10) finds the
  # wheel's libraries, not Debian's LibTorch 1.13 in /usr/lib.
  printf '%s\n' -G Ninja -DCMAKE_BUILD_TYPE=Release \
    "-DCMAKE_PREFIX_PATH=$tdir;$tdir/share/cmake" \
    "-DCUDAToolkit_ROOT=$CUDA_HOME" "-DCMAKE_CUDA_COMPILER=$CUDA_HOME/bin/nvcc" \
    "-DTORCH_CUDA_ARCH_LIST=$ARCH_LIST" \
    -DDTRAIN_BUILD_BENCH=OFF -DDTRAIN_USE_CCACHE=ON -DDTRAIN_REQUIRE_CUDA=ON
}

configure_and_build() {
  local tdir="$1" args
  mapfile -t args < <(cmake_args "$tdir")
  export CCACHE_DIR="$CCACHE"
  export CCACHE_BASEDIR="$SRC"
  mkdir -p "$CCACHE" "$BUILD"
  ccache --max-size=3G >/dev/null
  stage "configure (torch $TORCH_VERSION, CUDA)"
  # A build dir made from another source tree is rebuilt from scratch.
  if [[ -f "$BUILD/CMakeCache.txt" ]] &&
    ! grep -qxF "CMAKE_HOME_DIRECTORY:INTERNAL=$SRC" "$BUILD/CMakeCache.txt"; then
    log "$BUILD was configured for another source tree: wiping it"
    rm -rf "$BUILD"
  fi
  nice -n "$NICE" cmake -S "$SRC" -B "$BUILD" "${args[@]}"
  stage "build (torch $TORCH_VERSION, CUDA)"
  ccache --zero-stats >/dev/null
  # Only what `ctest -L unit` needs (with the dtrain program, which links
  # every component); bench/ is off.
  nice -n "$NICE" cmake --build "$BUILD" -j "$JOBS" --target dtrain_unit_tests
  log "ccache: $(ccache --show-stats 2>/dev/null | grep -Ei '^ *(hits|cache hit \(rate\))' | head -1 | tr -s ' ')"
  # Proof that the NCCL path was compiled: the process group refers to
  # c10d::ProcessGroupNCCL only under DTRAIN_HAVE_NCCL.
  # (grep -c reads all of nm's output: grep -q would end the pipe early and
  # pipefail would report nm's SIGPIPE.)
  local refs
  refs="$(nm -C "$BUILD/src/comm/libdtrain_comm.a" | grep -c 'c10d::ProcessGroupNCCL::ProcessGroupNCCL' || true)"
  [[ "$refs" -gt 0 ]] ||
    die "libdtrain_comm.a does not refer to c10d::ProcessGroupNCCL: the NCCL path was not compiled"
  log "NCCL path compiled: libdtrain_comm.a refers to c10d::ProcessGroupNCCL"
}

run_tests() {
  stage "ctest $CTEST_ARGS (torch $TORCH_VERSION, CPU)"
  local args
  read -r -a args <<<"$CTEST_ARGS"
  # The toolkit's libraries (cudart, cuBLAS, NCCL...) for the test binaries,
  # also where the loader's configuration does not list them.
  LD_LIBRARY_PATH="$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    nice -n "$NICE" timeout --kill-after=30 "$CTEST_TIMEOUT" \
    ctest --test-dir "$BUILD" --output-on-failure --no-tests=error -j "$JOBS" \
    --timeout "$TEST_TIMEOUT" "${args[@]}"
}

main() {
  local cmd="${1:-all}"
  case "$cmd" in
    all | prepare | env) ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
      return 0
      ;;
    *) die "unknown command '$cmd' (all, prepare, env)" ;;
  esac
  trap on_exit EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  check_tools
  take_lock
  prepare_venv
  local tdir
  tdir="$(torch_dir)"
  case "$cmd" in
    prepare) ;;
    env)
      cmake_args "$tdir"
      ;;
    all)
      configure_and_build "$tdir"
      run_tests
      ;;
  esac
  CURRENT_STAGE="done"
  log "OK (last stage took $((SECONDS - STAGE_START))s, ${SECONDS}s in all)"
}

main "$@"
