#!/usr/bin/env bash
# README command 2 (and CI, through .ci/run): set up, check the C++ files'
# formatting (scripts/check-format.sh), build, run every test with ctest, then
# build against a CUDA LibTorch 2.x (PyPI's torch wheel with the CUDA toolkit,
# so every CUDA and NCCL path compiles and links) and run the unit tests there
# on the CPU (scripts/cuda-torch.sh).
#
# Every stage runs even when an earlier test stage failed, so one run reports
# everything; the exit status is non-zero when any stage failed, and the last
# lines are a summary with ctest's result lines.
#
# Environment:
#   DTRAIN_CTEST_TIMEOUT  limit for the whole host ctest run, s (default 2700)
#   DTRAIN_TEST_TIMEOUT   per-test default for tests without one, s (default 300)
#   DTRAIN_JOBS           ctest/build parallelism (default 2 for ctest, nproc to build)
#   DTRAIN_BUILD_DIR      host build directory (default <repo>/build)
#   DTRAIN_CUDA_ONLY=1    run only set-up and the CUDA LibTorch stage
#   DTRAIN_SKIP_CUDA_TORCH=1  skip the CUDA LibTorch stage when it cannot run
#                         here (no toolkit, no index) instead of failing
#   DTRAIN_TORCH_*        passed on to scripts/cuda-torch.sh (see its header)
#   DTRAIN_SKIP_PEER_TORCH=1  do not make the PyTorch 2.x Python peer (its tests skip)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
readonly CTEST_TIMEOUT="${DTRAIN_CTEST_TIMEOUT:-2700}"
readonly TEST_TIMEOUT="${DTRAIN_TEST_TIMEOUT:-300}"
readonly CTEST_JOBS="${DTRAIN_JOBS:-2}"
readonly BUILD_DIR="${DTRAIN_BUILD_DIR:-${REPO_ROOT}/build}"

LOG_DIR=""
STAGES=()     # "name|status|seconds"
FAILED=0
STAGE_PID=""  # the running stage, for forwarding signals
STAGE_NAME="" # and its name
STAGE_START=0

log() { printf '==> test: %s\n' "$*"; }

# run_stage NAME LOGFILE CMD...: runs CMD, tees its output to LOGFILE and
# records the result; never fails itself. CMD runs in the background and this
# shell waits for it, so a SIGTERM to this script is handled at once (see
# on_signal); it stays in the terminal's process group, so Ctrl-C reaches it
# and sudo can still ask for a password.
run_stage() {
  local name="$1" logfile="$2" start rc=0
  shift 2
  log "stage: $name"
  STAGE_NAME="$name"
  STAGE_START=$SECONDS
  start=$SECONDS
  (
    set -o pipefail
    # tee ignores SIGINT and SIGTERM so that what the stage prints while it
    # stops (e.g. which cuda-torch stage failed) still reaches log and terminal.
    # A subshell, not exec: CMD may be a function (host_ctest).
    ( "$@" ) 2>&1 | { trap '' INT TERM; tee "$logfile"; }
  ) &
  STAGE_PID=$!
  wait "$STAGE_PID" || rc=$?
  STAGE_PID=""
  STAGE_NAME=""
  if [[ $rc -eq 0 ]]; then
    STAGES+=("$name|ok|$((SECONDS - start))")
  else
    STAGES+=("$name|FAILED (exit $rc)|$((SECONDS - start))")
    FAILED=1
    log "stage FAILED: $name (exit $rc)"
  fi
  return 0
}

skip_stage() {
  STAGES+=("$1|skipped: $2|0")
  log "stage skipped: $1 ($2)"
}

# kill_tree PID SIG: signals PID's descendants, then PID.
kill_tree() {
  local child
  for child in $(pgrep -P "$1" 2>/dev/null || true); do
    kill_tree "$child" "$2"
  done
  kill "-$2" "$1" 2>/dev/null || true
}

on_signal() {
  local sig="$1"
  trap '' INT TERM
  log "interrupted by SIG$sig: stopping the running stage"
  if [[ -n "$STAGE_PID" ]]; then
    local child waited=0
    for child in $(pgrep -P "$STAGE_PID" 2>/dev/null || true); do
      kill_tree "$child" TERM
    done
    # Give the stage time to clean up, then force it.
    while kill -0 "$STAGE_PID" 2>/dev/null && ((waited < 300)); do
      sleep 0.2
      waited=$((waited + 1))
    done
    kill_tree "$STAGE_PID" KILL
    wait "$STAGE_PID" 2>/dev/null || true
  fi
  STAGES+=("${STAGE_NAME:-(between stages)}|interrupted (SIG$sig)|$((SECONDS - STAGE_START))")
  FAILED=1
  print_summary
  exit $((128 + $(kill -l "$sig")))
}

host_ctest() {
  # timeout: a hung test must not hang CI; ctest's own --timeout covers tests
  # without a TIMEOUT property.
  timeout --kill-after=30 "$CTEST_TIMEOUT" \
    ctest --test-dir "$BUILD_DIR" --output-on-failure --no-tests=error -j "$CTEST_JOBS" \
    --timeout "$TEST_TIMEOUT"
}

# ctest's result lines: "N% tests passed, ...", the failed list, "Total Test time".
ctest_summary() {
  sed -n '/tests passed, /,$p' "$1" |
    grep -E 'tests passed, |The following tests|^[[:space:]]+[0-9]+ - |Total Test time' || true
}

print_summary() {
  local entry name status secs
  printf '\n==> test: summary\n'
  for entry in "${STAGES[@]}"; do
    IFS='|' read -r name status secs <<<"$entry"
    printf '    %-28s %-24s %6s\n' "$name" "$status" "${secs}s"
  done
  if [[ -s "$LOG_DIR/cuda-torch.log" ]]; then
    printf '\n  LibTorch 2.11 + CUDA (torch wheel) ctest -L unit on the CPU:\n'
    if grep -q 'tests passed, ' "$LOG_DIR/cuda-torch.log"; then
      ctest_summary "$LOG_DIR/cuda-torch.log"
    else
      grep -E '^==> cuda-torch: (FAILED|SKIPPED|ERROR)' "$LOG_DIR/cuda-torch.log" || true
    fi | sed 's/^/    /'
  fi
  if [[ -s "$LOG_DIR/ctest.log" ]]; then
    printf '\n  LibTorch 1.13 (host) ctest:\n'
    ctest_summary "$LOG_DIR/ctest.log" | sed 's/^/    /'
  fi
  if [[ $FAILED -ne 0 ]]; then
    printf '\n==> test: FAILED (logs in %s)\n' "$LOG_DIR"
  else
    printf '\n==> test: all stages passed\n'
  fi
}

# The PyTorch 2.x Python peer (scripts/peer-torch.sh: PyPI's torch 2.11 in a
# venv) that the store-dialect and Python-program tests drive beside Debian's
# torch 1.13. Without it those tests skip, saying so; so this stage never
# fails the run: it records why it could not make the venv. DTRAIN_SKIP_PEER_TORCH=1
# leaves it out.
peer_torch_stage() {
  local name="peer torch 2.11 (Python)" start=$SECONDS
  if [[ "${DTRAIN_SKIP_PEER_TORCH:-0}" == 1 ]]; then
    skip_stage "$name" "DTRAIN_SKIP_PEER_TORCH=1 (its tests skip)"
    return 0
  fi
  log "stage: $name"
  if bash scripts/peer-torch.sh >"$LOG_DIR/peer-torch.log" 2>&1; then
    STAGES+=("$name|ok|$((SECONDS - start))")
  else
    local why
    why="$(grep -m1 'ERROR' "$LOG_DIR/peer-torch.log" | sed 's/.*ERROR: //' || true)"
    skip_stage "$name" "${why:-see $LOG_DIR/peer-torch.log} (its tests skip)"
  fi
}

main() {
  cd "$REPO_ROOT"
  LOG_DIR="$(mktemp -d "${TMPDIR:-/tmp}/dtrain-test.XXXXXX")"
  trap 'on_signal INT' INT
  trap 'on_signal TERM' TERM

  run_stage "install dependencies" "$LOG_DIR/install-deps.log" bash scripts/install-deps.sh
  if [[ $FAILED -ne 0 ]]; then
    print_summary
    return 1
  fi
  peer_torch_stage
  if [[ "${DTRAIN_CUDA_ONLY:-0}" != 1 ]]; then
    # Seconds, and it needs only clang-format-14 from the step above: a
    # formatting slip is reported before the long stages start (they still run).
    run_stage "format (clang-format-14)" "$LOG_DIR/format.log" bash scripts/check-format.sh
    local failed_before=$FAILED
    FAILED=0
    run_stage "build (LibTorch 1.13)" "$LOG_DIR/build.log" bash scripts/build.sh
    local build_failed=$FAILED
    FAILED=$((failed_before | FAILED))
    if [[ $build_failed -eq 0 ]]; then
      run_stage "ctest (LibTorch 1.13)" "$LOG_DIR/ctest.log" host_ctest
    else
      skip_stage "ctest (LibTorch 1.13)" "build failed"
    fi
  fi
  run_stage "LibTorch 2.11 + CUDA" "$LOG_DIR/cuda-torch.log" bash scripts/cuda-torch.sh
  print_summary
  return "$FAILED"
}

main "$@"
