#!/usr/bin/env bash
# The Python peer for dtrain's interoperability tests with PyTorch 2.x: a venv
# with PyPI's torch (2.11.0 by default) and the Python packages `import torch`
# needs, beside Debian's python3-torch 1.13 (/usr/bin/python3). The tests that
# drive a real PyTorch 2.x client or DDP program (tests/comm/store_server,
# tests/launch) use it and skip, saying so, when it is absent.
#
#   scripts/peer-torch.sh            create the venv (cached; a stamp marks a complete one),
#                                    then print how to run its python
#   scripts/peer-torch.sh env        print PEER_PYTHON=... and PEER_LD_LIBRARY_PATH=...
#                                    (exit 3 when the venv is not there)
#   scripts/peer-torch.sh command    print one line: env LD_LIBRARY_PATH=... <python>
#                                    (nothing, exit 3, when the venv is not there)
#
# The wheels are installed with --no-deps (the CUDA wheels torch lists are not
# needed on the CPU): torch and torchvision, and the few runtime wheels whose
# libraries libtorch's loader asks for; then torch's pure-Python dependencies.
# Its python needs the CUDA toolkit's lib64 (when present) and the venv's
# nvidia/*/lib folders on LD_LIBRARY_PATH, which `env` and `command` print.
#
# Environment:
#   DTRAIN_PEER_TORCH_VERSION  torch wheel (default 2.11.0; torchvision 0.26.0 with it)
#   DTRAIN_PEER_TORCH_VENV     the venv (default /var/cache/dtrain/peer-torch-<version>
#                              when writable, else ~/.cache/dtrain/peer-torch-<version>)
#   DTRAIN_PEER_PYTHON         Python that makes the venv (default python3)
#   DTRAIN_CUDA_HOME           CUDA toolkit (default /usr/local/cuda)
set -euo pipefail

readonly VERSION="${DTRAIN_PEER_TORCH_VERSION:-2.11.0}"
readonly CUDA_HOME="${DTRAIN_CUDA_HOME:-/usr/local/cuda}"
if [[ -n "${DTRAIN_PEER_TORCH_VENV:-}" ]]; then
  VENV="$DTRAIN_PEER_TORCH_VENV"
elif [[ -d /var/cache/dtrain/peer-torch-$VERSION || -w /var/cache/dtrain || -w /var/cache ]]; then
  VENV="/var/cache/dtrain/peer-torch-$VERSION"
else
  VENV="$HOME/.cache/dtrain/peer-torch-$VERSION"
fi
readonly VENV

log() { printf '==> peer-torch: %s\n' "$*" >&2; }
die() { printf '==> peer-torch: ERROR: %s\n' "$*" >&2; exit 1; }

# The wheels `pip install --no-deps` takes, by torch version.
wheels() {
  case "$VERSION" in
    2.11.0)
      echo "torch==2.11.0 torchvision==0.26.0 nvidia-cusparselt-cu13==0.8.0" \
        "nvidia-nvshmem-cu13==3.4.5 nvidia-cufile==1.15.1.6.*"
      ;;
    *) echo "torch==$VERSION" ;;
  esac
}
readonly PY_DEPS="filelock typing-extensions sympy networkx jinja2 fsspec numpy pillow mpmath markupsafe"

python_bin() { echo "$VENV/bin/python"; }

ld_path() {
  local parts=() d
  [[ -d "$CUDA_HOME/lib64" ]] && parts+=("$CUDA_HOME/lib64")
  for d in "$VENV"/lib/python3*/site-packages/nvidia/*/lib; do
    [[ -d "$d" ]] && parts+=("$d")
  done
  local IFS=:
  echo "${parts[*]}"
}

# A venv counts as present when torch is installed in it (the stamp is ours;
# a venv made by hand the same way has none and is accepted too). Importing
# torch would take seconds on every test run, so only its files are looked at.
present() {
  [[ -x "$(python_bin)" ]] || return 1
  [[ -f "$VENV/.dtrain-peer-ok" ]] && return 0
  compgen -G "$VENV/lib/python3*/site-packages/torch/lib/libtorch_cpu.so" >/dev/null &&
    compgen -G "$VENV/lib/python3*/site-packages/sympy" >/dev/null
}

create() {
  if present; then
    log "venv ready: $VENV"
    return
  fi
  local py="${DTRAIN_PEER_PYTHON:-python3}"
  command -v "$py" >/dev/null || die "$py not found: install Python 3 (or set DTRAIN_PEER_PYTHON)"
  log "creating $VENV (torch $VERSION, CPU use; this downloads about 1 GB)"
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  "$py" -m venv "$VENV" || die "cannot create a venv with $py: install python3-venv"
  # shellcheck disable=SC2046
  "$(python_bin)" -m pip install --quiet --no-deps $(wheels) ||
    die "pip could not install torch $VERSION (no network, or no wheel for this Python)"
  # shellcheck disable=SC2086
  "$(python_bin)" -m pip install --quiet $PY_DEPS || die "pip could not install torch's dependencies"
  LD_LIBRARY_PATH="$(ld_path)" "$(python_bin)" -c 'import torch; print(torch.__version__)' >&2 ||
    die "the venv's python cannot import torch"
  touch "$VENV/.dtrain-peer-ok"
  log "VENV_OK"
}

case "${1:-create}" in
  create)
    create
    printf 'PEER_PYTHON=%s\nPEER_LD_LIBRARY_PATH=%s\n' "$(python_bin)" "$(ld_path)"
    ;;
  env)
    present || exit 3
    printf 'PEER_PYTHON=%s\nPEER_LD_LIBRARY_PATH=%s\n' "$(python_bin)" "$(ld_path)"
    ;;
  command)
    present || exit 3
    printf 'env LD_LIBRARY_PATH=%s %s\n' "$(ld_path)" "$(python_bin)"
    ;;
  *) die "unknown command '$1' (create, env, command)" ;;
esac
