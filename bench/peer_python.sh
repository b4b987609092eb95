# shellcheck shell=bash
# Sourced by the side-by-side benchmarks: picks the PyTorch peer whose torch is
# the LibTorch dtrain was built on, so both sides run the same kernels.
#
#   source bench/peer_python.sh
#   peer_select DTRAIN_BINARY     sets PEER_PY (the peer's python), PEER_ENV (an
#                                 `env` prefix with its LD_LIBRARY_PATH, possibly
#                                 empty), DTRAIN_TORCH and PEER_TORCH (versions)
#   peer_versions                 prints one line naming both versions
#
# The peer is, in this order: DTRAIN_PEER_PYTHON when set (any Python with torch
# and torchvision, e.g. a GPU machine's); for dtrain built on LibTorch 2.x, the
# venv of scripts/peer-torch.sh for that version (PyPI's torch; made by
# `bash scripts/peer-torch.sh`); for dtrain on Debian's 1.13, /usr/bin/python3
# (python3-torch). When the two versions differ the benchmark still runs and
# peer_versions says so: such a ratio compares kernels, not dtrain.

peer_select() {
    local dtrain=$1 root
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    DTRAIN_TORCH=$("$dtrain" --version 2>/dev/null | sed -n 's/^LibTorch \([^ ]*\).*/\1/p')
    DTRAIN_TORCH=${DTRAIN_TORCH:-unknown}
    PEER_ENV=()
    if [[ -n ${DTRAIN_PEER_PYTHON:-} ]]; then
        PEER_PY=$DTRAIN_PEER_PYTHON
    elif [[ $DTRAIN_TORCH == 2.* ]]; then
        local base=${DTRAIN_TORCH%%+*} envs
        # peer-torch.sh reads DTRAIN_PEER_PYTHON as the python that makes its venv;
        # it is unset here
        if envs=$(DTRAIN_PEER_TORCH_VERSION=$base bash "$root/scripts/peer-torch.sh" env 2>/dev/null); then
            PEER_PY=$(sed -n 's/^PEER_PYTHON=//p' <<<"$envs")
            PEER_ENV=(env "LD_LIBRARY_PATH=$(sed -n 's/^PEER_LD_LIBRARY_PATH=//p' <<<"$envs")")
        else
            echo "no PyTorch $base peer: make it with 'DTRAIN_PEER_TORCH_VERSION=$base bash" \
                 "scripts/peer-torch.sh', or set DTRAIN_PEER_PYTHON" >&2
            return 1
        fi
    else
        PEER_PY=/usr/bin/python3
    fi
    command -v "$PEER_PY" >/dev/null || {
        echo "peer python $PEER_PY not found (python3-torch, scripts/peer-torch.sh, or DTRAIN_PEER_PYTHON)" >&2
        return 1
    }
    PEER_TORCH=$("${PEER_ENV[@]}" "$PEER_PY" -c 'import torch; print(torch.__version__)' 2>/dev/null) ||
        PEER_TORCH=unknown
}

peer_versions() {
    local note=""
    if [[ $DTRAIN_TORCH == unknown || $PEER_TORCH == unknown ]]; then
        note="  WARNING: cannot tell whether the versions match"
    elif [[ ${DTRAIN_TORCH%%+*} != "${PEER_TORCH%%+*}" ]]; then
        note="  WARNING: different versions; the ratio compares kernels, not dtrain"
    fi
    echo "dtrain on LibTorch $DTRAIN_TORCH; peer PyTorch $PEER_TORCH ($PEER_PY)$note"
}
