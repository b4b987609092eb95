#!/usr/bin/env bash
# README command 2 (and CI, through .ci/run): set up, check the C++ files'
# formatting (scripts/check-format.sh), then two builds:
#   1. the default build, LibTorch 2.11 from PyPI's torch wheel
#      (scripts/build.sh, scripts/torch-wheel.sh) -- the CUDA build where the
#      CUDA toolkit is, so every CUDA and NCCL path compiles and links, else
#      the wheel's CPU library -- and EVERY test on it (ctest);
#   2. the 1.13 build, Debian's LibTorch (DTRAIN_TORCH=system, in
#      build-1.13/, at -O1), only the unit tests and what they run, and
#      `ctest -L unit`;
# then the hardening stages (docs/testing.md has each stage's time budget):
#   3. sanitize: the torch-free unit tests of the parsers and the core library
#      under ASan+UBSan (scripts/sanitize.sh --ci, build-asan/);
#   4. fuzz: a bounded run of every libFuzzer target
#      (scripts/fuzz.sh, clang-14, build-fuzz/); a crash, leak or sanitizer
#      report fails it.
# Every stage runs even when an earlier test stage failed, so one run reports
# everything; the exit status is non-zero when any stage failed, and the last
# lines are a summary with ctest's result lines. Without the CUDA toolkit the
# CUDA build is skipped (the CPU build takes its place) and the very last line
# says so and how to enable it; CI=true (.ci/run) requires the CUDA build.
#
# Environment:
#   DTRAIN_CTEST_TIMEOUT  limit for each ctest run, s (default 2700)
#   DTRAIN_TEST_TIMEOUT   per-test default for tests without one, s (default 300)
#   DTRAIN_JOBS           ctest/build parallelism (default 2 for ctest, nproc to build)
#   DTRAIN_BUILD_DIR      the 2.11 build (default <repo>/build)
#   DTRAIN_SYSTEM_BUILD_DIR  the 1.13 build (default <repo>/build-1.13)
#   DTRAIN_TEST_STAGES    which stages, of "wheel system sanitize fuzz" (default all)
#   DTRAIN_FUZZ_SECONDS   mutation time per fuzz target in the fuzz stage (default 10)
#   DTRAIN_CTEST_PER_TEST=1  one ctest test per TEST in both builds, instead of
#                         one per test program (Note [One process a program]
#                         in cmake/dtrain.cmake)
#   CI=true               the 2.11 build must be the CUDA build (no fallback)
#   DTRAIN_TORCH_*, DTRAIN_CUDA_HOME  passed on to scripts/torch-wheel.sh
#   DTRAIN_SKIP_PEER_TORCH=1  do not make the PyTorch 2.x Python peer (its tests skip)
#   DTRAIN_SKIP_S3_TEST_ENV=1 do not make the boto3/moto venv (the S3 tests skip)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
readonly CTEST_TIMEOUT="${DTRAIN_CTEST_TIMEOUT:-2700}"
readonly TEST_TIMEOUT="${DTRAIN_TEST_TIMEOUT:-300}"
readonly CTEST_JOBS="${DTRAIN_JOBS:-2}"
readonly BUILD_DIR="${DTRAIN_BUILD_DIR:-${REPO_ROOT}/build}"
readonly SYSTEM_BUILD_DIR="${DTRAIN_SYSTEM_BUILD_DIR:-${REPO_ROOT}/build-1.13}"
readonly TEST_STAGES="${DTRAIN_TEST_STAGES:-wheel system sanitize fuzz}"
readonly FUZZ_SECONDS="${DTRAIN_FUZZ_SECONDS:-10}"
# Note [One process a program] (cmake/dtrain.cmake): each test program is one
# ctest test, so LibTorch's start-up is paid once a program, not once a TEST.
PER_PROGRAM=ON
[[ "${DTRAIN_CTEST_PER_TEST:-0}" == 1 ]] && PER_PROGRAM=OFF
readonly PER_PROGRAM
# The fuzz stage runs every target in fuzz/ (scripts/fuzz.sh's default): the
# torch-free ones and the five built on LibTorch's headers (torch_save_load,
# data_records, image_decode, packed_index, webdataset_tar), so that a source
# a parser starts to need is caught by CI's link, not by the next long run.
readonly CUDA_HOME="${DTRAIN_CUDA_HOME:-/usr/local/cuda}"

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
    # stops (e.g. why the torch wheel could not be set up) still reaches log and terminal.
    # A subshell, not exec: CMD may be a function (run_ctest).
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

# run_ctest BUILD_DIR [CTEST ARGS...]
run_ctest() {
  local dir="$1"
  shift
  # timeout: a hung test must not hang CI; ctest's own --timeout covers tests
  # without a TIMEOUT property.
  timeout --kill-after=30 "$CTEST_TIMEOUT" \
    ctest --test-dir "$dir" --output-on-failure --no-tests=error -j "$CTEST_JOBS" \
    --timeout "$TEST_TIMEOUT" "$@"
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
    printf '    %-36s %-24s %6s\n' "$name" "$status" "${secs}s"
  done
  local logfile title
  for logfile in ctest-wheel ctest-system; do
    [[ -s "$LOG_DIR/$logfile.log" ]] || continue
    title="LibTorch 2.11 (torch wheel) ctest, every test"
    [[ "$logfile" == ctest-system ]] && title="LibTorch 1.13 (Debian) ctest -L unit"
    printf '\n  %s:\n' "$title"
    ctest_summary "$LOG_DIR/$logfile.log" | sed 's/^/    /'
  done
  if [[ $FAILED -ne 0 ]]; then
    printf '\n==> test: FAILED (logs in %s)\n' "$LOG_DIR"
  else
    printf '\n==> test: all stages passed\n'
  fi
  # Last: what did not run here, and how to run it.
  if [[ -n "$SKIPPED_CUDA" ]]; then
    printf '==> test: skipped the CUDA build (%s): install the CUDA 13 toolkit with cuDNN and NCCL at %s, or set DTRAIN_CUDA_HOME, to run it\n' \
      "$SKIPPED_CUDA" "$CUDA_HOME"
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

# The boto3/moto venv (scripts/s3-test-env.sh) that the object-store tests use
# as the independent S3 client and server; like the peer above, its tests skip
# without it, so this stage never fails the run. DTRAIN_SKIP_S3_TEST_ENV=1
# leaves it out.
s3_test_env_stage() {
  local name="boto3 + moto venv (S3 tests)" start=$SECONDS
  if [[ "${DTRAIN_SKIP_S3_TEST_ENV:-0}" == 1 ]]; then
    skip_stage "$name" "DTRAIN_SKIP_S3_TEST_ENV=1 (its tests skip)"
    return 0
  fi
  log "stage: $name"
  if bash scripts/s3-test-env.sh >"$LOG_DIR/s3-test-env.log" 2>&1; then
    STAGES+=("$name|ok|$((SECONDS - start))")
  else
    local why
    why="$(grep -m1 'ERROR' "$LOG_DIR/s3-test-env.log" | sed 's/.*ERROR: //' || true)"
    skip_stage "$name" "${why:-see $LOG_DIR/s3-test-env.log} (its tests skip)"
  fi
}

SKIPPED_CUDA="" # why the CUDA build did not run, when it did not

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
  s3_test_env_stage
  # Seconds, and it needs only clang-format-14 from the step above: a
  # formatting slip is reported before the long stages start (they still run).
  run_stage "format (clang-format-14)" "$LOG_DIR/format.log" bash scripts/check-format.sh

  if [[ " $TEST_STAGES " == *" wheel "* ]]; then
    local flavour="CPU library" build_env=(DTRAIN_TORCH=wheel)
    if [[ "${CI:-}" == true ]]; then
      flavour="CUDA"
      build_env+=(DTRAIN_REQUIRE_CUDA=1)
    elif [[ -x "$CUDA_HOME/bin/nvcc" && -f "$CUDA_HOME/include/nccl.h" ]]; then
      flavour="CUDA"
    elif [[ -x "$CUDA_HOME/bin/nvcc" ]]; then
      SKIPPED_CUDA="the toolkit at $CUDA_HOME has no nccl.h"
    else
      SKIPPED_CUDA="no CUDA toolkit at $CUDA_HOME"
    fi
    local failed_before=$FAILED
    FAILED=0
    run_stage "build (LibTorch 2.11, $flavour)" "$LOG_DIR/build-wheel.log" \
      env "${build_env[@]}" DTRAIN_BUILD_DIR="$BUILD_DIR" bash scripts/build.sh \
      -DDTRAIN_BUILD_TESTS=ON -DDTRAIN_BUILD_BENCH=ON -DDTRAIN_CTEST_PER_PROGRAM="$PER_PROGRAM"
    local build_failed=$FAILED
    FAILED=$((failed_before | FAILED))
    if [[ $build_failed -eq 0 ]]; then
      run_stage "ctest (LibTorch 2.11, all)" "$LOG_DIR/ctest-wheel.log" run_ctest "$BUILD_DIR"
    else
      skip_stage "ctest (LibTorch 2.11, all)" "build failed"
    fi
  fi

  if [[ " $TEST_STAGES " == *" system "* ]]; then
    # Only the unit tests and the programs they start (bench/ off): the full
    # suite runs on the 2.11 build above. At -O1: this build checks that
    # dtrain compiles and behaves on 1.13, and nothing is timed on it; -O1
    # took 471 s cold against -O3's 599 s, and its tests the same 374 s
    # (docs/testing.md).
    local failed_before=$FAILED
    FAILED=0
    run_stage "build (LibTorch 1.13, unit tests)" "$LOG_DIR/build-system.log" \
      env DTRAIN_TORCH=system DTRAIN_BUILD_DIR="$SYSTEM_BUILD_DIR" DTRAIN_BUILD_TARGETS="dtrain dtrain_unit_tests" \
      bash scripts/build.sh -DDTRAIN_BUILD_TESTS=ON -DDTRAIN_BUILD_BENCH=OFF \
      -DDTRAIN_CTEST_PER_PROGRAM="$PER_PROGRAM" "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG"
    local build_failed=$FAILED
    FAILED=$((failed_before | FAILED))
    if [[ $build_failed -eq 0 ]]; then
      run_stage "ctest -L unit (LibTorch 1.13)" "$LOG_DIR/ctest-system.log" run_ctest "$SYSTEM_BUILD_DIR" -L unit
    else
      skip_stage "ctest -L unit (LibTorch 1.13)" "build failed"
    fi
  fi

  # Hardening (docs/testing.md has the budgets): each bounded by `timeout`
  # (30 and 20 minutes), so a hang fails the stage instead of CI.
  if [[ " $TEST_STAGES " == *" sanitize "* ]]; then
    run_stage "sanitize (ASan+UBSan, torch-free unit)" "$LOG_DIR/sanitize.log" \
      timeout --kill-after=30 1800 bash scripts/sanitize.sh --ci
  fi
  if [[ " $TEST_STAGES " == *" fuzz "* ]]; then
    run_stage "fuzz (${FUZZ_SECONDS} s per target)" "$LOG_DIR/fuzz.log" \
      timeout --kill-after=30 1200 bash scripts/fuzz.sh -t "$FUZZ_SECONDS"
  fi
  print_summary
  return "$FAILED"
}

main "$@"
