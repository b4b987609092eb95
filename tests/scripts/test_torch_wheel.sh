#!/usr/bin/env bash
# scripts/build.sh and scripts/torch-wheel.sh on bad input (issue 22's "Bad
# input"): a torch version PyPI does not have, no network for the wheel, a
# Python that cannot make a venv. Each gives ONE line naming the cause and the
# fallback, the 1.13 build; build.sh takes the fallback (exit 0, with that
# line) where Debian's LibTorch is installed and the fallback is allowed, and
# fails (exit 1) otherwise.
#
# No network and no compiler: pip is a fake (DTRAIN_TORCH_PIP) that answers
# as pip does, cmake and ninja are fakes that record their arguments, the
# "installed" Debian LibTorch is a folder holding a TorchConfig.cmake
# (DTRAIN_SYSTEM_TORCH_DIR), and there is no CUDA toolkit (DTRAIN_CUDA_HOME).
#
#   bash tests/scripts/test_torch_wheel.sh    exit 0 when every case passes
set -uo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/dtrain-torch-wheel-test.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
FAILURES=0

mkdir -p "$TMP/bin" "$TMP/debian-torch"
touch "$TMP/debian-torch/TorchConfig.cmake"
# cmake and ninja that only record how they were called.
for tool in cmake ninja; do
  printf '#!/bin/sh\necho "%s $*" >>"%s/calls"\n' "$tool" "$TMP" >"$TMP/bin/$tool"
  chmod +x "$TMP/bin/$tool"
done
# pip as it answers a version the index lacks, and without a network.
cat >"$TMP/pip-no-such-version" <<'EOF'
#!/bin/sh
echo "ERROR: Could not find a version that satisfies the requirement torch==0.0.1 (from versions: 2.10.0, 2.11.0)"
echo "ERROR: No matching distribution found for torch==0.0.1"
exit 1
EOF
cat >"$TMP/pip-offline" <<'EOF'
#!/bin/sh
echo "WARNING: Retrying (Retry(total=1, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f>: Failed to establish a new connection: [Errno -3] Temporary failure in name resolution')': /simple/torch/"
echo "ERROR: Could not find a version that satisfies the requirement torch==2.11.0 (from versions: none)"
echo "ERROR: No matching distribution found for torch==2.11.0"
exit 1
EOF
# A Python without the venv module (Debian's python3 without python3-venv).
cat >"$TMP/python-without-venv" <<'EOF'
#!/bin/sh
if [ "$1" = -c ]; then
  case "$2" in *"import venv"*) echo "ModuleNotFoundError: No module named 'ensurepip'" >&2; exit 1 ;; esac
fi
exec python3 "$@"
EOF
chmod +x "$TMP/pip-no-such-version" "$TMP/pip-offline" "$TMP/python-without-venv"

# check NAME EXPECTED_EXIT CAUSE_REGEX SHOULD_CONFIGURE_1_13 ENV... -- CMD...
#   runs CMD with ENV in a clean cache; passes when the exit status is
#   EXPECTED_EXIT, exactly one output line names the cause (CAUSE_REGEX) and
#   "the 1.13 build", and fake cmake was (or was not) run with Debian's Torch_DIR.
check() {
  local name="$1" want_rc="$2" cause="$3" configured="$4"
  shift 4
  local envs=()
  while [[ "$1" != -- ]]; do
    envs+=("$1")
    shift
  done
  shift
  rm -rf "$TMP/cache" "$TMP/calls" "$TMP/build"
  local out rc=0 lines
  out="$(env PATH="$TMP/bin:$PATH" DTRAIN_TORCH_CACHE="$TMP/cache" DTRAIN_CUDA_HOME=/nonexistent \
    DTRAIN_BUILD_DIR="$TMP/build" CCACHE_DIR="$TMP/ccache" DTRAIN_SYSTEM_TORCH_DIR="$TMP/debian-torch" \
    CI= "${envs[@]}" timeout 120 "$@" 2>&1)" || rc=$?
  lines="$(grep -cE "${cause}.*the 1\.13 build" <<<"$out")"
  local ok=1
  [[ $rc -eq $want_rc ]] || { echo "  exit $rc, expected $want_rc"; ok=0; }
  [[ "$lines" -eq 1 ]] || { echo "  $lines lines match /${cause}.*the 1.13 build/, expected 1"; ok=0; }
  if [[ "$configured" == yes ]]; then
    grep -q -- "-DTorch_DIR=$TMP/debian-torch" "$TMP/calls" 2>/dev/null ||
      { echo "  the 1.13 build was not configured"; ok=0; }
  elif [[ -f "$TMP/calls" ]]; then
    echo "  cmake ran: $(head -1 "$TMP/calls")"
    ok=0
  fi
  if ((ok)); then
    echo "PASS: $name"
  else
    echo "FAIL: $name; output:"
    sed 's/^/    | /' <<<"$out"
    FAILURES=$((FAILURES + 1))
  fi
}

build=(bash "$REPO_ROOT/scripts/build.sh")
wheel=(bash "$REPO_ROOT/scripts/torch-wheel.sh" cmake-args)

check "a version PyPI lacks: build.sh falls back to the 1.13 build with one line" 0 \
  "PyPI has no torch==0\.0\.1" yes \
  DTRAIN_TORCH_VERSION=0.0.1 DTRAIN_TORCH_PIP="$TMP/pip-no-such-version" -- "${build[@]}"
check "a version PyPI lacks, no Debian LibTorch: build.sh fails with one line" 1 \
  "PyPI has no torch==0\.0\.1" no \
  DTRAIN_TORCH_VERSION=0.0.1 DTRAIN_TORCH_PIP="$TMP/pip-no-such-version" \
  DTRAIN_SYSTEM_TORCH_DIR=/nonexistent -- "${build[@]}"
check "a version PyPI lacks: torch-wheel.sh exits 3 with one line" 3 \
  "PyPI has no torch==0\.0\.1" no \
  DTRAIN_TORCH_VERSION=0.0.1 DTRAIN_TORCH_PIP="$TMP/pip-no-such-version" -- "${wheel[@]}"
check "no network for the wheel: build.sh falls back to the 1.13 build with one line" 0 \
  "no network" yes \
  DTRAIN_TORCH_PIP="$TMP/pip-offline" -- "${build[@]}"
check "no network under CI=true: build.sh fails with one line, no fallback" 1 \
  "no network" no \
  DTRAIN_TORCH_PIP="$TMP/pip-offline" CI=true -- "${build[@]}"
check "no python3-venv: build.sh falls back to the 1.13 build with one line" 0 \
  "cannot make a venv" yes \
  DTRAIN_TORCH_PYTHON="$TMP/python-without-venv" -- "${build[@]}"
check "no python3-venv under DTRAIN_TORCH=wheel: build.sh fails with one line" 1 \
  "cannot make a venv" no \
  DTRAIN_TORCH_PYTHON="$TMP/python-without-venv" DTRAIN_TORCH=wheel -- "${build[@]}"

# No half-made venv is left behind for the next run to trust.
if compgen -G "$TMP/cache/torch-*/bin" >/dev/null; then
  echo "FAIL: a venv was left in $TMP/cache"
  FAILURES=$((FAILURES + 1))
fi

if [[ $FAILURES -ne 0 ]]; then
  echo "$FAILURES case(s) failed"
  exit 1
fi
echo "all cases passed"
