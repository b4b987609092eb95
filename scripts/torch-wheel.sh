#!/usr/bin/env bash
# Sets up PyPI's torch wheel (2.11.0, built with CUDA 13) as dtrain's LibTorch:
# the default build of scripts/build.sh, and so of README commands 1 and 2
# (scripts/demo.sh, scripts/test.sh). The one place that knows which wheels
# the build needs; build.sh asks it for CMake arguments.
#
#   scripts/torch-wheel.sh prepare      make the venv, or reuse it (cached)
#   scripts/torch-wheel.sh cmake-args   prepare, then print the CMake arguments
#                                       for this machine, one a line, on stdout
#   scripts/torch-wheel.sh ccache-dir   print the ccache folder wheel builds use
#
# Two flavours, chosen by whether the machine has the CUDA toolkit
# (DTRAIN_TORCH_CUDA=auto):
# - CPU: no toolkit. Only the wheel's CPU library is linked (libtorch_cpu,
#   libc10: -DDTRAIN_TORCH_CPU_ONLY=ON, Note [The wheel's CPU library] in
#   cmake/torch_cpu.cmake); beside torch the venv holds only the CUDA runtime
#   and CUPTI wheels, the two CUDA libraries libtorch_cpu.so loads.
# - CUDA: the toolkit at DTRAIN_CUDA_HOME (nvcc and nccl.h). The whole CUDA
#   LibTorch is linked, so every CUDA and NCCL code path compiles (CI's CUDA
#   stage); the venv adds the wheels for the libraries libtorch_cuda.so loads
#   and the toolkit lacks (cuSPARSELt, NVSHMEM, cuFile); the toolkit gives the
#   rest (cuBLAS, cuDNN, NCCL, nvcc).
# Either way the programs find these libraries through their RPATH (Note
# [RPATH to the wheel] in CMakeLists.txt): no LD_LIBRARY_PATH.
#
# Every wheel is installed with --no-deps into a venv outside the repository
# (torch's Python dependencies are not needed: torch is never imported; its
# folder is found with importlib's find_spec, which is what
# torch.utils.cmake_prefix_path is relative to). A stamp file lists what a
# venv holds (.dtrain-wheels): a CPU venv gets the CUDA flavour's wheels added when a toolkit
# appears; a venv for another Python, or a broken one, is rebuilt. pip takes
# its index from the machine's own pip configuration.
#
# Exit status: 0 ready; 3 the wheel cannot be set up here, with ONE line on
# stderr naming the cause and the fallback (DTRAIN_TORCH=system, the 1.13
# build with Debian's LibTorch; build.sh takes it by itself where it can);
# 1 other failures; 2 usage errors.
#
# Environment:
#   DTRAIN_TORCH_VERSION   the torch wheel          (default 2.11.0)
#   DTRAIN_TORCH_CACHE     cache root               (default /var/cache/dtrain when
#                                                    writable, else ~/.cache/dtrain)
#   DTRAIN_TORCH_VENV      the venv                 (default <cache>/torch-<version>)
#   DTRAIN_TORCH_CCACHE    ccache dir of wheel builds (default <cache>/torch-<version>-ccache)
#   DTRAIN_TORCH_PYTHON    Python for the venv      (default python3; needs a wheel for it)
#   DTRAIN_TORCH_FIND_LINKS  a folder of wheels pip looks in first (e.g. the
#                          output of `pip download`), optional
#   DTRAIN_TORCH_PIP       the pip command          (default <venv>/bin/python -m pip;
#                                                    the tests put a fake one here)
#   DTRAIN_TORCH_CUDA      auto | 1 | 0             (default auto: 1 when the toolkit is there)
#   DTRAIN_CUDA_HOME       CUDA toolkit             (default /usr/local/cuda)
#   DTRAIN_TORCH_CUDA_ARCH_LIST  TORCH_CUDA_ARCH_LIST (default 9.0, Hopper)
#   DTRAIN_TORCH_CAUSE_FILE  where to write the one-line cause instead of
#                          printing it (build.sh, which prints it with the fallback)
set -euo pipefail

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
readonly CCACHE="${DTRAIN_TORCH_CCACHE:-${CACHE}/torch-${TORCH_VERSION}-ccache}"
readonly PYTHON="${DTRAIN_TORCH_PYTHON:-python3}"
readonly FIND_LINKS="${DTRAIN_TORCH_FIND_LINKS:-}"
readonly CUDA_HOME="${DTRAIN_CUDA_HOME:-/usr/local/cuda}"
readonly ARCH_LIST="${DTRAIN_TORCH_CUDA_ARCH_LIST:-9.0}"
readonly CAUSE_FILE="${DTRAIN_TORCH_CAUSE_FILE:-}"
CUDA=0 # 1: the CUDA flavour (set by choose_flavour)

log() { printf '==> torch-wheel: %s\n' "$*" >&2; }
die() {
  printf '==> torch-wheel: ERROR: %s\n' "$*" >&2
  exit 1
}
# cannot_set_up CAUSE: the wheel cannot be used here; exit 3 with one line.
cannot_set_up() {
  if [[ -n "$CAUSE_FILE" ]]; then
    printf '%s\n' "$1" >"$CAUSE_FILE"
  else
    printf '==> torch-wheel: ERROR: %s; DTRAIN_TORCH=system builds the 1.13 build (Debian'"'"'s LibTorch) instead\n' \
      "$1" >&2
  fi
  exit 3
}

# The wheels installed beside torch, as pip requirements, pinned to what
# torch's metadata asks for (Requires-Dist: cuda-toolkit[cudart,cupti,...]==13.0.2,
# whose own metadata pins the runtime and CUPTI; nvidia-cusparselt-cu13 etc.).
#   cpu: libcudart.so.13 and libcupti.so.13, which libtorch_cpu.so needs
#   cuda: libcusparseLt.so.0, libnvshmem_host.so.3, libcufile.so.0, which
#         libtorch_cuda.so needs and the toolkit lacks (the toolkit, made from
#         the NVIDIA wheels torch pins, has the rest; see $CUDA_HOME/dist-info)
# libcuda.so.1, the driver, is needed only by libcaffe2_nvrtc.so, which
# LibTorch opens on first use of a GPU; nothing links it.
companion_wheels() {
  case "$TORCH_VERSION:$1" in
    2.11.0:cpu) printf '%s\n' 'nvidia-cuda-runtime==13.0.96.*' 'nvidia-cuda-cupti==13.0.85.*' ;;
    2.11.0:cuda) printf '%s\n' nvidia-cusparselt-cu13==0.8.0 nvidia-nvshmem-cu13==3.4.5 'nvidia-cufile==1.15.1.6.*' ;;
    *) return 1 ;;
  esac
}

# The requirements a venv of this flavour holds, one a line.
wanted_wheels() {
  printf 'torch==%s\n' "$TORCH_VERSION"
  companion_wheels cpu
  [[ $CUDA -eq 0 ]] || companion_wheels cuda
}

choose_flavour() {
  local have_toolkit=0
  [[ -x "$CUDA_HOME/bin/nvcc" && -f "$CUDA_HOME/include/nccl.h" ]] && have_toolkit=1
  case "${DTRAIN_TORCH_CUDA:-auto}" in
    auto) CUDA=$have_toolkit ;;
    0) CUDA=0 ;;
    1)
      [[ $have_toolkit -eq 1 ]] ||
        cannot_set_up "DTRAIN_TORCH_CUDA=1 but there is no CUDA toolkit with NCCL at $CUDA_HOME (nvcc, include/nccl.h); set DTRAIN_CUDA_HOME"
      CUDA=1
      ;;
    *) die "DTRAIN_TORCH_CUDA must be auto, 1 or 0, not '${DTRAIN_TORCH_CUDA}'" ;;
  esac
}

check_python() {
  command -v "$PYTHON" >/dev/null 2>&1 || cannot_set_up "$PYTHON not found (set DTRAIN_TORCH_PYTHON)"
  "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1 ||
    cannot_set_up "$PYTHON cannot make a venv (no python3-venv: apt-get install python3-venv)"
}

# One run at a time per venv: a second run would rebuild it under the first.
take_lock() {
  mkdir -p "$(dirname "$VENV")" || cannot_set_up "cannot create $(dirname "$VENV") (set DTRAIN_TORCH_CACHE)"
  exec 9>"${VENV}.lock"
  if ! flock -n 9; then
    log "waiting for another run using $VENV"
    flock -w 3600 9 || die "timed out waiting for ${VENV}.lock"
  fi
}

# ---- the venv -------------------------------------------------------------------

# The torch package folder (torch.utils.cmake_prefix_path is <it>/share/cmake).
torch_dir() {
  "$VENV/bin/python" -c 'import importlib.util, os
spec = importlib.util.find_spec("torch")
print(os.path.dirname(spec.origin) if spec and spec.origin else "")' 2>/dev/null || true
}

python_tag() { "$1" -c 'import sys; print("python=%d.%d" % sys.version_info[:2])'; }

# The stamp, .dtrain-wheels: the venv's Python ("python=3.11"), then one
# requirement a line. A venv made by scripts/cuda-torch.sh (before this
# script) has instead .dtrain-complete, all on one line, Python last: it is
# read the same way rather than downloaded again, and left as it is.
STAMP_NAME=.dtrain-wheels
read_stamp() {
  if [[ -f "$VENV/$STAMP_NAME" ]]; then
    cat "$VENV/$STAMP_NAME"
  elif [[ -f "$VENV/.dtrain-complete" ]]; then
    tr -s ' ' '\n' <"$VENV/.dtrain-complete" | grep -v '^$' |
      awk '/^python=/ {print; next} {rest[++n] = $0} END {for (i = 1; i <= n; i++) print rest[i]}'
  fi
}

# Prints the wanted wheels the venv lacks; fails when the venv must be rebuilt.
venv_missing() {
  local tdir
  [[ -x "$VENV/bin/python" && -n "$(read_stamp)" ]] || return 1
  [[ "$(read_stamp | head -1)" == "$(python_tag "$PYTHON")" ]] || return 1
  tdir="$(torch_dir)"
  [[ -n "$tdir" && -f "$tdir/share/cmake/Torch/TorchConfig.cmake" ]] || return 1
  wanted_wheels | grep -vxF -f <(read_stamp | tail -n +2) || true
}

pip_cmd() {
  if [[ -n "${DTRAIN_TORCH_PIP:-}" ]]; then
    # shellcheck disable=SC2206 # a command line, split as the user wrote it
    PIP=(${DTRAIN_TORCH_PIP})
  else
    PIP=("$VENV/bin/python" -m pip)
  fi
}

# pip_install REQUIREMENT...: installs them with --no-deps; on failure exits 3
# naming the cause as pip's output shows it.
pip_install() {
  local out what arg
  for arg in "$@"; do
    [[ "$arg" == -* ]] || { what="$arg"; break; }
  done
  out="$(mktemp)"
  local args=(install --no-deps --no-input --progress-bar off --disable-pip-version-check --timeout 60 --retries 2)
  [[ -n "$FIND_LINKS" ]] && args+=(--find-links "$FIND_LINKS")
  log "pip install $*"
  if "${PIP[@]}" "${args[@]}" "$@" 2>&1 | tee "$out" >&2; then
    rm -f "$out"
    return 0
  fi
  local cause
  if grep -qE 'NewConnectionError|Temporary failure in name resolution|Network is unreachable|ConnectTimeout|ProxyError|Max retries exceeded|Failed to establish' "$out"; then
    cause="no network: pip could not reach the package index for $what"
  elif grep -q 'No matching distribution found' "$out"; then
    cause="PyPI has no $what for $("$PYTHON" --version 2>&1) (see pip's list of versions above; set DTRAIN_TORCH_VERSION)"
  else
    cause="pip install $* failed (see pip's output above)"
  fi
  rm -f "$out"
  discard_partial_venv
  cannot_set_up "$cause"
}

# A venv that never got its stamp is useless: it would be rebuilt anyway.
discard_partial_venv() {
  [[ -n "$(read_stamp)" ]] && return 0
  case "$VENV" in
    / | /usr | /var | /var/cache | "$HOME" | "") return 0 ;;
  esac
  rm -rf "$VENV"
}

make_venv() {
  local missing
  if missing="$(venv_missing)"; then
    if [[ -z "$missing" ]]; then
      log "reusing $VENV"
      return 0
    fi
    mapfile -t missing <<<"$missing"
    pip_cmd
    pip_install "${missing[@]}"
  else
    log "making $VENV (torch $TORCH_VERSION, $( ((CUDA)) && echo CUDA || echo CPU) flavour)"
    case "$VENV" in
      / | /usr | /var | /var/cache | "$HOME" | "") die "refusing to remove '$VENV'" ;;
    esac
    rm -rf "$VENV"
    # A venv of its own needs its own pip; with DTRAIN_TORCH_PIP it does not.
    local venv_args=()
    [[ -z "${DTRAIN_TORCH_PIP:-}" ]] || venv_args=(--without-pip)
    "$PYTHON" -m venv "${venv_args[@]}" "$VENV" >&2 || {
      rm -rf "$VENV"
      cannot_set_up "$PYTHON -m venv $VENV failed (python3-venv missing or broken?)"
    }
    pip_cmd
    local wanted
    if ! companion_wheels cpu >/dev/null; then
      # Name the right cause: a version PyPI lacks, or one this script lacks.
      pip_install --dry-run "torch==$TORCH_VERSION"
      discard_partial_venv
      cannot_set_up "torch $TORCH_VERSION is on PyPI but dtrain knows the CUDA wheels it needs only for 2.11.0 (companion_wheels in scripts/torch-wheel.sh)"
    fi
    mapfile -t wanted < <(wanted_wheels)
    pip_install "${wanted[@]}"
  fi
  { python_tag "$PYTHON"; wanted_wheels; read_stamp | tail -n +2; } |
    awk 'NR == 1 || !seen[$0]++' >"$VENV/$STAMP_NAME.new"
  mv "$VENV/$STAMP_NAME.new" "$VENV/$STAMP_NAME"
}

# Every DT_NEEDED library of the libraries the build links must resolve (the
# toolkit's folder stands in for the programs' RPATH), except the driver.
check_torch_libraries() {
  local lib libs=("$1/lib/libtorch_cpu.so" "$1/lib/libc10.so") missing=()
  if ((CUDA)); then
    libs=("$1"/lib/libtorch*.so "$1"/lib/libc10*.so)
  fi
  local out so
  for lib in "${libs[@]}"; do
    [[ "$lib" == */libcaffe2_nvrtc.so ]] && continue
    # ldd's own failure (a missing or non-ELF file) must not read as
    # "nothing missing".
    out="$(LD_LIBRARY_PATH="$( ((CUDA)) && printf '%s/lib64:%s/lib' "$CUDA_HOME" "$CUDA_HOME")" ldd "$lib" 2>&1)" ||
      die "ldd cannot read $lib: ${out%%$'\n'*}; remove the venv ($VENV) and run again"
    while read -r so; do
      [[ -n "$so" ]] && missing+=("$so (needed by ${lib##*/})")
    done < <(awk '/not found/ && $1 != "libcuda.so.1" {print $1}' <<<"$out")
  done
  [[ ${#missing[@]} -eq 0 ]] ||
    die "libraries not found: ${missing[*]}; add the wheel that ships them to companion_wheels in scripts/torch-wheel.sh"
}

prepare() {
  choose_flavour
  check_python
  take_lock
  make_venv
  TORCH_DIR="$(torch_dir)"
  [[ -n "$TORCH_DIR" ]] || die "torch is not importable from $VENV"
  check_torch_libraries "$TORCH_DIR"
  log "torch $TORCH_VERSION at $TORCH_DIR ($( ((CUDA)) && echo "CUDA, toolkit $CUDA_HOME" || echo "CPU library only"))"
}

cmake_args() {
  # The torch folder first, so that TorchConfig's find_library(torch c10)
  # finds the wheel's libraries, not Debian's LibTorch 1.13 in /usr/lib.
  printf '%s\n' "-DCMAKE_PREFIX_PATH=$TORCH_DIR;$TORCH_DIR/share/cmake"
  if ((CUDA)); then
    printf '%s\n' "-DCUDAToolkit_ROOT=$CUDA_HOME" "-DCMAKE_CUDA_COMPILER=$CUDA_HOME/bin/nvcc" \
      "-DTORCH_CUDA_ARCH_LIST=$ARCH_LIST" -DDTRAIN_TORCH_CPU_ONLY=OFF
  else
    printf '%s\n' -DDTRAIN_TORCH_CPU_ONLY=ON
  fi
}

main() {
  case "${1:-}" in
    prepare) prepare ;;
    cmake-args)
      prepare
      cmake_args
      ;;
    ccache-dir) printf '%s\n' "$CCACHE" ;;
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' ;;
    *)
      printf 'usage: scripts/torch-wheel.sh prepare|cmake-args|ccache-dir\n' >&2
      exit 2
      ;;
  esac
}

main "$@"
