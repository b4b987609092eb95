#!/usr/bin/env bash
# The first-batch latency of a 1.28-million-key S3 listing (issue 18): an
# ImageFolder of 1000 classes x 1281 training images (+ 50 validation images
# a class) served by listing_server.py on loopback, opened by 1 to 4 ranks
# (bench_listing_first_batch, one process a rank) that each take their first
# training batch. For each run: the ListObjectsV2 requests the server saw
# (probes and listing pages), rank 0's open time and the slowest rank's time
# from its exec to its first batch.
#
#   bench/s3/listing_first_batch.sh [--ranks "1 2 4"] [--classes 1000]
#                                   [--per-class 1281] [--val-per-class 50]
#                                   [--alone] [--threads 2]
#
# Ranks of a group open together (Note [Shared listing]: rank 0 lists);
# --alone adds a run per multi-rank count where every rank lists by itself
# (open_dataset(options) with its share: the cost before). Needs the
# bench_listing_first_batch target (DTRAIN_BUILD_DIR, default build/) and
# /usr/bin/python3 with PIL (for the one JPEG every key answers).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="${DTRAIN_BUILD_DIR:-${REPO_ROOT}/build}"
BENCH="${BUILD_DIR}/bench/bench_listing_first_batch"
RANKS="1 2 4"
CLASSES=1000
PER_CLASS=1281
VAL_PER_CLASS=50
ALONE=0
THREADS=2
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ranks) RANKS="$2"; shift 2 ;;
    --classes) CLASSES="$2"; shift 2 ;;
    --per-class) PER_CLASS="$2"; shift 2 ;;
    --val-per-class) VAL_PER_CLASS="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --alone) ALONE=1; shift ;;
    *) echo "unknown flag $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
[[ -x "$BENCH" ]] || {
  echo "no $BENCH; build it: DTRAIN_BUILD_TARGETS=bench_listing_first_batch scripts/build.sh" >&2
  exit 1
}

WORK="$(mktemp -d)"
PIDS=() # the server and the running ranks, each under timeout
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

timeout 3600 /usr/bin/python3 "${REPO_ROOT}/bench/s3/listing_server.py" --port-file "$WORK/port" \
  --classes "$CLASSES" --train-per-class "$PER_CLASS" --val-per-class "$VAL_PER_CLASS" &
PIDS+=($!)
for _ in $(seq 100); do [[ -s "$WORK/port" ]] && break; sleep 0.1; done
[[ -s "$WORK/port" ]] || { echo "listing_server.py did not start" >&2; exit 1; }
ENDPOINT="http://127.0.0.1:$(cat "$WORK/port")"
export AWS_ENDPOINT_URL="$ENDPOINT" AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench \
  AWS_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true AWS_S3_ADDRESSING_STYLE=path

stats() { /usr/bin/python3 -c "import json,sys,urllib.request as u; \
print(json.load(u.urlopen('$ENDPOINT/__stats?reset=1'))[sys.argv[1]])" "$1"; }
free_port() { /usr/bin/python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); \
print(s.getsockname()[1])"; }

echo "# $((CLASSES * PER_CLASS)) training + $((CLASSES * VAL_PER_CLASS)) validation keys at" \
  "$ENDPOINT; $(nproc) cores; batch 32, $THREADS loader threads a rank"
echo "# before: $(uptime)"
printf '%6s %8s %14s %10s %18s\n' ranks mode list_requests open_s first_batch_s
run() {  # run WORLD MODE
  local world="$1" mode="$2" port ranks=() r
  port="$(free_port)"
  stats list >/dev/null
  for ((r = 0; r < world; r++)); do
    local flags=(--threads "$THREADS")
    [[ "$mode" == alone ]] && flags+=(--alone)
    RANK=$r WORLD_SIZE=$world LOCAL_RANK=$r LOCAL_WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$port timeout 900 "$BENCH" "s3://data/imagenet" "${flags[@]}" \
      >"$WORK/rank$r.out" 2>&1 &
    ranks+=($!)
    PIDS+=($!)
  done
  local failed=0 p
  for p in "${ranks[@]}"; do wait "$p" || failed=1; done
  if [[ $failed == 1 ]]; then
    cat "$WORK"/rank*.out >&2
    exit 1
  fi
  local lists open first
  lists="$(stats list)"
  open="$(sed -n 's/.*: open \([0-9.]*\) s.*/\1/p' "$WORK/rank0.out")"
  first="$(sed -n 's/.*first batch \([0-9.]*\) s.*/\1/p' "$WORK"/rank*.out | sort -g | tail -1)"
  printf '%6s %8s %14s %10s %18s\n' "$world" "$mode" "$lists" "$open" "$first"
  sed 's/^/#   /' "$WORK"/rank*.out
  rm -f "$WORK"/rank*.out
}
for world in $RANKS; do
  run "$world" shared
  if [[ $ALONE == 1 && $world -gt 1 ]]; then run "$world" alone; fi
done
echo "# after: $(uptime)"
