#!/usr/bin/env bash
# Builds dtrain's libFuzzer targets (fuzz/, clang-14, ASan+UBSan, LibTorch
# uninstrumented) and runs each for N seconds; fails on any crash, leak,
# timeout, out-of-memory or sanitizer report. docs/fuzzing.md.
#
#   scripts/fuzz.sh [-t SECONDS] [--merge] [--no-build] [TARGET...]
#
#   -t SECONDS   mutation time per target (default 30; 0: only replay the corpus)
#   --merge      add the inputs that reached new coverage to fuzz/corpus/TARGET
#   --no-build   use the targets already built
#   TARGET       e.g. ps_meta (default: every target in fuzz/CMakeLists.txt)
#
# Environment: DTRAIN_FUZZ_BUILD_DIR (default build-fuzz), DTRAIN_JOBS (default
# nproc), DTRAIN_FUZZ_OUT (findings and logs; default BUILD_DIR/fuzz-out).
# A finding is left in DTRAIN_FUZZ_OUT/TARGET-crash-<sha1>: reproduce it with
# BUILD_DIR/fuzz/fuzz_TARGET FILE, then add it to fuzz/corpus/TARGET with the fix.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
readonly BUILD_DIR="${DTRAIN_FUZZ_BUILD_DIR:-$REPO_ROOT/build-fuzz}"
readonly OUT="${DTRAIN_FUZZ_OUT:-$BUILD_DIR/fuzz-out}"
readonly JOBS="${DTRAIN_JOBS:-$(nproc)}"
SECONDS_PER_TARGET=30
MERGE=0
BUILD=1
TARGETS=()

log() { printf '==> fuzz: %s\n' "$*"; }
die() { printf '==> fuzz: ERROR: %s\n' "$*" >&2; exit 1; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    -t) SECONDS_PER_TARGET="${2:?-t needs seconds}"; shift 2 ;;
    --merge) MERGE=1; shift ;;
    --no-build) BUILD=0; shift ;;
    -h | --help) sed -n '2,16p' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) TARGETS+=("$1"); shift ;;
  esac
done
[[ "$SECONDS_PER_TARGET" =~ ^[0-9]+$ ]] || die "-t takes whole seconds, not '$SECONDS_PER_TARGET'"
if [[ ${#TARGETS[@]} -eq 0 ]]; then
  mapfile -t TARGETS < <(sed -n 's/^ *dtrain_fuzzer(\([a-z0-9_]*\) .*/\1/p' "$REPO_ROOT"/fuzz/*.cmake \
    "$REPO_ROOT/fuzz/CMakeLists.txt" 2>/dev/null | sort -u)
fi

if [[ $BUILD -eq 1 ]]; then
  command -v clang++-14 >/dev/null || die "clang++-14 not found (scripts/install-deps.sh installs it)"
  export CCACHE_DIR="${CCACHE_DIR:-${HOME:-/tmp}/.cache/dtrain-ccache}"
  export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$REPO_ROOT}"
  generator=()
  [[ -f "$BUILD_DIR/CMakeCache.txt" ]] || generator=(-G Ninja)
  log "configure $BUILD_DIR (clang-14, ASan+UBSan+libFuzzer)"
  CC=clang-14 CXX=clang++-14 cmake -S "$REPO_ROOT" -B "$BUILD_DIR" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDTRAIN_FUZZ=ON -DDTRAIN_BUILD_TESTS=OFF \
    -DDTRAIN_BUILD_BENCH=OFF >/dev/null
  log "build ${TARGETS[*]} with $JOBS jobs"
  cmake --build "$BUILD_DIR" -j "$JOBS" --target "${TARGETS[@]/#/fuzz_}"
fi

mkdir -p "$OUT"
# Leaks fail the run; UBSan stops at the first report (-fno-sanitize-recover)
# and prints its stack.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# Leaks inside the uninstrumented libraries are theirs (LibTorch's zip reader
# leaks on some refused archives); dtrain's own leaks still fail the run.
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$REPO_ROOT/scripts/lsan.supp:print_suppressions=0}"
# A target that reads another's inputs (fuzz/CMakeLists.txt's CORPUS).
corpus_of() {
  case "$1" in
    torch_save_load) echo torch_save ;;
    *) echo "$1" ;;
  esac
}
failed=()
printf '%-14s %8s %8s %10s %7s %s\n' target cov ft execs corpus result >"$OUT/summary.txt"
for t in "${TARGETS[@]}"; do
  bin="$BUILD_DIR/fuzz/fuzz_$t"
  corpus="$REPO_ROOT/fuzz/corpus/$(corpus_of "$t")"
  [[ -x "$bin" ]] || die "no $bin (build it, or drop --no-build)"
  [[ -d "$corpus" ]] || die "no seed corpus $corpus"
  work="$OUT/corpus-$t"
  rm -rf "$work"
  mkdir -p "$work"
  args=(-max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024
        -artifact_prefix="$OUT/$t-" -print_final_stats=1)
  dict="$REPO_ROOT/fuzz/dict/$(corpus_of "$t").dict"
  [[ -f "$dict" ]] && args+=(-dict="$dict")
  [[ "$SECONDS_PER_TARGET" -eq 0 ]] && args+=(-runs=0)
  log "$t: ${SECONDS_PER_TARGET}s"
  result=ok
  # -jobs/-workers stay 1: CI runners and this project's machines are shared.
  if ! "$bin" "${args[@]}" "$work" "$corpus" >"$OUT/$t.log" 2>&1; then
    result=FAILED
    failed+=("$t")
    tail -n 40 "$OUT/$t.log" >&2
  fi
  last="$(grep -E '^#[0-9]+' "$OUT/$t.log" | tail -n 1 || true)"
  cov="$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")"
  ft="$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")"
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$OUT/$t.log")"
  size="$(find "$work" "$corpus" -type f | wc -l)"
  printf '%-14s %8s %8s %10s %7s %s\n' "$t" "${cov:--}" "${ft:--}" "${execs:--}" "$size" "$result" \
    >>"$OUT/summary.txt"
  if [[ $MERGE -eq 1 && "$result" == ok ]]; then
    "$bin" -merge=1 "$corpus" "$work" >>"$OUT/$t.log" 2>&1 || die "$t: merge failed"
  fi
done
cat "$OUT/summary.txt"
[[ ${#failed[@]} -eq 0 ]] || die "findings in: ${failed[*]} (inputs and logs in $OUT)"
log "ok: ${#TARGETS[@]} targets, ${SECONDS_PER_TARGET}s each"
