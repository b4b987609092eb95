#!/usr/bin/env bash
# The unit tests under AddressSanitizer + UndefinedBehaviorSanitizer: dtrain's
# code instrumented, LibTorch and the other prebuilt libraries not
# (Note [Sanitizers beside an uninstrumented LibTorch], cmake/sanitize.cmake).
# Any sanitizer report fails the test that triggered it. docs/fuzzing.md.
#
#   scripts/sanitize.sh [--ci] [-t TARGET]... [-- CTEST_ARGS...]
#
#   --ci         CI's sanitize stage (scripts/test.sh): only the torch-free unit
#                tests of the parsers of outside bytes and the core library
#                (test_common, test_ps, test_objstore; docs/testing.md has the
#                budget); without it, every unit test
#   -t TARGET    build only these targets (default: dtrain_unit_tests and dtrain,
#                everything `ctest -L unit` runs); e.g. -t test_common -t test_ps
#   CTEST_ARGS   what to run (default: -L unit); e.g. -- -R '^(ErrorFile|Protocol)'
#
# Environment: DTRAIN_SANITIZE_BUILD_DIR (default build-asan), DTRAIN_JOBS
# (default nproc). Prints the time the build and the tests took.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
readonly BUILD_DIR="${DTRAIN_SANITIZE_BUILD_DIR:-$REPO_ROOT/build-asan}"
readonly JOBS="${DTRAIN_JOBS:-$(nproc)}"
TARGETS=()
CTEST_ARGS=()

log() { printf '==> sanitize: %s\n' "$*"; }
die() { printf '==> sanitize: ERROR: %s\n' "$*" >&2; exit 1; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --ci)
      TARGETS+=(test_common test_ps test_objstore)
      CTEST_ARGS=(-L 'unit_(common|ps|objstore)')
      shift ;;
    -t) TARGETS+=("${2:?-t needs a target}"); shift 2 ;;
    --) shift; CTEST_ARGS=("$@"); break ;;
    -h | --help) sed -n '2,19p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
[[ ${#TARGETS[@]} -gt 0 ]] || TARGETS=(dtrain_unit_tests dtrain)
[[ ${#CTEST_ARGS[@]} -gt 0 ]] || CTEST_ARGS=(-L unit)

export CCACHE_DIR="${CCACHE_DIR:-${HOME:-/tmp}/.cache/dtrain-ccache}"
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$REPO_ROOT}"
generator=()
[[ -f "$BUILD_DIR/CMakeCache.txt" ]] || generator=(-G Ninja)
start=$(date +%s)
log "configure $BUILD_DIR (ASan+UBSan)"
cmake -S "$REPO_ROOT" -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDTRAIN_SANITIZE=ON -DDTRAIN_BUILD_BENCH=OFF -DDTRAIN_USE_CCACHE=ON >/dev/null
log "build ${TARGETS[*]} with $JOBS jobs"
cmake --build "$BUILD_DIR" -j "$JOBS" --target "${TARGETS[@]}"
built=$(date +%s)

# Leaks inside the uninstrumented libraries (LibTorch's and protobuf's
# process-lifetime registries) are theirs, not dtrain's.
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$REPO_ROOT/scripts/lsan.supp:print_suppressions=0}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
log "ctest ${CTEST_ARGS[*]}"
rc=0
ctest --test-dir "$BUILD_DIR" --output-on-failure --no-tests=error -j 1 "${CTEST_ARGS[@]}" || rc=$?
done_at=$(date +%s)
log "build $((built - start)) s, tests $((done_at - built)) s"
exit "$rc"
