#!/usr/bin/env bash
# Issue 18: images/sec of decode + RandomResizedCrop(224) + flip + normalise
# read from an S3 bucket behind a link shaped like S3 from a cloud VM (1 Gbit/s,
# 10 ms round trip), dtrain's ImageLoader (`s3://`, bench/loader/bench_loader)
# against AWS's s3torchconnector 1.5 (S3MapDataset and S3IterableDataset with
# torchvision's transforms in a DataLoader, bench/s3/s3torchconnector_loader.py),
# and against dtrain reading the same JPEGs from local disk; plus each client's
# CPU seconds per GB for raw GETs (bytes read, nothing decoded).
#
#   bench/s3/s3_vs_s3torchconnector.sh [--build build] [--data DIR] [--images N]
#                                      [--epochs E] [--repeat R] [--rate 1gbit]
#                                      [--delay 5ms] [--peer-workers "1 8"]
#                                      [--timeout SECS] [--pairs N]
#                                      [--layout folder|packed] [--shuffle-block K]
#
# --pairs N runs only dtrain: N pairs of local-disk and S3 runs, alternating,
# and prints each pair's S3/local ratio and their median (the issue's "90% of
# the local-disk rate", read off pairs run back to back rather than off two
# bests); no peer runs, no raw GETs.
#
# --layout packed: dtrain's local and S3 runs read the JPEGs packed into
# 16 MiB shards in a shuffled order (`dtrain data pack --shuffle`, as
# s3://bench/packed), the peer's still read one object per image;
# --shuffle-block K: dtrain's loader reads blocks of K neighbours (Note [Block
# order]), so from a pack each block is one ranged GET. Default: folder, 1.
#
# Layout: two network namespaces (bench/netns/netns.sh: dtrainbench0, the
# client, 10.213.0.1; dtrainbench1, the server, 10.213.0.2) joined by a veth
# pair whose two ends are shaped with tbf to RATE. The server is Debian's nginx
# serving the folder as a path-style S3 bucket (bench/s3/static_s3.py:
# ListObjectsV2 pages, ranged GETs, If-Match; moto_server's own speed, 95 to
# 145 GETs/s per core, would be what is measured), on loopback behind
# bench/s3/delay_relay.py, which adds DELAY each way (the round trip is
# 2 x DELAY): this kernel has no netem qdisc, so tc cannot add the latency. Every client runs pinned to CPU 0 (`taskset -c 0`),
# the server to CPU 1, so each figure is per client core: dtrain with one
# decode thread (and its fetch threads), the peer with each of --peer-workers
# DataLoader workers (more workers overlap more GETs; the table's ratio is
# against the peer's best).
# Each configuration runs R times (default 3), interleaved (dtrain's local and
# S3 runs three times a round); the best is kept.
# Needs root (ip netns), nginx, and the peer venv of scripts/peer-torch.sh,
# into which s3torchconnector 1.5 is installed when missing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=bench/peer_python.sh
source "$root/bench/peer_python.sh"
build="$root/build"
data="${TMPDIR:-/tmp}/dtrain-s3-bench"
images=1000
epochs=2
peer_workers="1 8"
repeat=3
rate=1gbit
delay=5ms
limit=900
port=39180
pairs=0
layout=folder
block=1
s3tc_version=1.5.0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    --images) images="$2"; shift 2 ;;
    --epochs) epochs="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --delay) delay="$2"; shift 2 ;;
    --peer-workers) peer_workers="$2"; shift 2 ;;
    --timeout) limit="$2"; shift 2 ;;
    --pairs) pairs="$2"; shift 2 ;;
    --layout) layout="$2"; shift 2 ;;
    --shuffle-block) block="$2"; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
bench="$build/bench/bench_loader"
[[ -x "$bench" ]] || { echo "missing $bench; build with -DDTRAIN_BUILD_BENCH=ON" >&2; exit 1; }
command -v nginx >/dev/null || { echo "nginx is missing: apt-get install nginx-light" >&2; exit 1; }
[[ "$pairs" =~ ^[0-9]+$ ]] || { echo "--pairs takes a count, not '$pairs'" >&2; exit 2; }
[[ "$layout" == folder || "$layout" == packed ]] ||
  { echo "--layout takes folder or packed, not '$layout'" >&2; exit 2; }
[[ "$block" =~ ^[1-9][0-9]*$ ]] || { echo "--shuffle-block takes a count >= 1, not '$block'" >&2; exit 2; }
peer_select "$build/dtrain" || exit 1
py=("${PEER_ENV[@]}" "$PEER_PY")
if ! "${py[@]}" -c "import s3torchconnector" 2>/dev/null; then
  echo "installing s3torchconnector $s3tc_version into the peer venv"
  "$PEER_PY" -m pip install --quiet "s3torchconnector==$s3tc_version" \
    "s3torchconnectorclient==$s3tc_version" >&2
fi
peer_versions
echo "s3torchconnector $("${py[@]}" -c 'import importlib.metadata as m; print(m.version("s3torchconnector"))')"

bucket=bench
objects="$data/root/$bucket/train"
if [[ ! -f "$data/.complete-$images" ]]; then
  rm -rf "$data"
  echo "generating $images JPEGs (500x375) in $objects"
  timeout "$limit" "${py[@]}" "$root/bench/loader/make_jpegs.py" "$objects" --classes 10 \
    --per-class $((images / 10))
  touch "$data/.complete-$images"
fi
packed="$data/root/$bucket/packed"
if [[ "$layout" == packed && ! -f "$data/.packed-$images" ]]; then
  rm -rf "$packed"
  "$build/dtrain" data pack "$objects" "$packed" --shuffle --shard-size-mb 16 >&2
  touch "$data/.packed-$images"
fi
run="$data/run"
mkdir -p "$run"
server=10.213.0.2
prefixes=(train/)
[[ "$layout" == packed ]] && prefixes+=(packed/)
"${py[@]}" "$here/static_s3.py" "$data/root" "$bucket" "127.0.0.1:$((port + 1))" "$run/nginx.conf" \
  "${prefixes[@]}"
echo "dataset: $(find "$objects" -name '*.JPEG' | wc -l) JPEGs, $(du -sh "$objects" | cut -f1)"
bytes_per_epoch=$(find "$objects" -name '*.JPEG' -printf '%s\n' | awk '{ s += $1 } END { print s }')

netns="$root/bench/netns/netns.sh"
cleanup() {
  [[ -f "$run/nginx.pid" ]] && kill "$(cat "$run/nginx.pid")" 2>/dev/null || true
  bash "$netns" down >/dev/null 2>&1 || true
}
trap cleanup EXIT
DTRAINBENCH_RATE=$rate bash "$netns" up
ip netns exec dtrainbench1 taskset -c 1 nginx -c "$run/nginx.conf" &
ip netns exec dtrainbench1 taskset -c 1 "$PEER_PY" "$here/delay_relay.py" "$server" "$port" \
  127.0.0.1 $((port + 1)) "${delay%ms}" &
for _ in $(seq 1 50); do
  ip netns exec dtrainbench0 curl -sf -o /dev/null "http://$server:$port/$bucket?list-type=2" && break
  sleep 0.1
done
rtt=$(ip netns exec dtrainbench0 curl -s -o /dev/null -w '%{time_starttransfer}' \
  "http://$server:$port/$bucket?list-type=2&prefix=none")
echo "link: $rate each way (tbf), ${delay} each way through the relay; a request's time to first byte on a new connection: $(awk -v t="$rtt" 'BEGIN { printf "%.1f", t * 1000 }') ms"
echo "cpus: $(nproc) ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')); client on CPU 0, nginx on CPU 1"

# The clients' S3 settings: any keys (nginx checks none), the endpoint, path style.
s3env=(env AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench AWS_REGION=us-east-1
       AWS_ENDPOINT_URL_S3="http://$server:$port" AWS_S3_ADDRESSING_STYLE=path
       AWS_EC2_METADATA_DISABLED=true)
client=(ip netns exec dtrainbench0 taskset -c 0 "${s3env[@]}")
uri="s3://$bucket/train"
declare -A cmd r cpu
mine="--threads 1 --epochs $epochs --shuffle-block $block"
if [[ "$layout" == packed ]]; then
  echo "dtrain reads: $packed ($(find "$packed" -name 'shard-*' | wc -l) shards), as s3://$bucket/packed; shuffle block $block"
  s3src="s3://$bucket/packed --packed"
  cmd[local]="$bench $packed --packed $mine"
else
  echo "dtrain reads: one object per image; shuffle block $block"
  s3src=$uri
  cmd[local]="$bench $objects $mine"
fi
cmd[s3]="$bench $s3src $mine"
cmd[s3-nofetch]="${cmd[s3]} --fetch-threads 0"
peer="${py[*]} $here/s3torchconnector_loader.py $uri/ --endpoint http://$server:$port --epochs $epochs"
if ((pairs > 0)); then
  echo "load before: $(uptime)"
  ratios=()
  for ((i = 1; i <= pairs; i++)); do
    declare -A pair=() busy=()
    for key in local s3; do
      # shellcheck disable=SC2086
      line=$(timeout "$limit" "${client[@]}" ${cmd[$key]}) || true  # named below
      pair[$key]=$(sed -n 's/.*images_per_sec=\([0-9.]*\).*/\1/p' <<<"$line")
      # How busy the client's core was: its CPU seconds over the timed seconds.
      busy[$key]=$(awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
        END { if (v["seconds"] > 0) printf "%.0f%%", 100 * v["cpu_seconds"] / v["seconds"] }' <<<"$line")
      [[ -n "${pair[$key]}" ]] || {
        echo "pair $i: the $key run (${cmd[$key]}) printed no images_per_sec; see its output above" >&2
        exit 1
      }
    done
    ratio=$(awk -v s="${pair[s3]}" -v l="${pair[local]}" 'BEGIN { printf "%.3f", s / l }')
    ratios+=("$ratio")
    echo "pair $i: local ${pair[local]} images/s (core ${busy[local]} busy), s3 ${pair[s3]} images/s (core ${busy[s3]} busy), s3/local $ratio"
  done
  echo "load after: $(uptime)"
  printf '%s\n' "${ratios[@]}" | sort -n | awk '{ a[NR] = $1 } END {
    m = NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
    printf "S3/local over %d pairs: median %.3f, range %.3f-%.3f\n", NR, m, a[1], a[NR] }'
  exit 0
fi
# dtrain's two runs take seconds: three pairs a round, so that the local/S3
# ratio is read off the least disturbed of six runs each.
order=(local s3 local s3 local s3)
for w in $peer_workers; do
  cmd[s3tc-map-w$w]="$peer --workers $w"
  cmd[s3tc-iterable-w$w]="$peer --dataset iterable --workers $w"
  order+=("s3tc-map-w$w" "s3tc-iterable-w$w")
done
last_w=${peer_workers##* }
cmd[raw-dtrain]="$bench $s3src --fetch-only --epochs $epochs --shuffle-block $block"
cmd[raw-s3tc]="$peer --raw --workers $last_w"
order+=(s3-nofetch raw-dtrain raw-s3tc)
echo "load before: $(uptime)"
for ((round = 0; round < repeat; round++)); do
  for key in "${order[@]}"; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    # shellcheck disable=SC2086
    line=$(timeout "$limit" "${client[@]}" ${cmd[$key]})
    echo "round $((round + 1)) $key (load before $load): $line" >&2
    v=$(sed -n 's/.*images_per_sec=\([0-9.]*\).*/\1/p' <<<"$line")
    c=$(sed -n 's/.*cpu_seconds=\([0-9.]*\).*/\1/p' <<<"$line")
    if awk -v a="${r[$key]:-0}" -v b="$v" 'BEGIN { exit !(b > a) }'; then
      r[$key]=$v
      cpu[$key]=$c
    fi
  done
done
echo "load after: $(uptime)"
gb=$(awk -v b="$bytes_per_epoch" -v e="$epochs" 'BEGIN { print b * e / 1e9 }')
echo
best_peer=0
for key in "${!r[@]}"; do
  [[ $key == s3tc-* ]] || continue
  awk -v a="$best_peer" -v b="${r[$key]}" 'BEGIN { exit !(b > a) }' && best_peer=${r[$key]}
done
echo "| client (1 core) | images/s | dtrain S3 against it | CPU s per GB |"
echo "|---|---|---|---|"
shown=(local s3 s3-nofetch)
for w in $peer_workers; do shown+=("s3tc-map-w$w" "s3tc-iterable-w$w"); done
for key in "${shown[@]}"; do
  awk -v k="$key" -v v="${r[$key]}" -v d="${r[s3]}" -v c="${cpu[$key]}" -v gb="$gb" 'BEGIN {
    printf "| %s | %.0f | %.2fx | %.1f |\n", k, v, d / v, c / gb }'
done
awk -v d="${r[s3]}" -v l="${r[local]}" -v p="$best_peer" 'BEGIN {
  printf "\ndtrain from S3: %.2fx the best s3torchconnector run, %.0f%% of dtrain from local disk\n", d / p, 100 * d / l }'
echo
echo "| raw GETs, no decoding (1 core) | objects/s | MB/s | CPU s per GB |"
echo "|---|---|---|---|"
for key in raw-dtrain raw-s3tc; do
  awk -v k="$key" -v v="${r[$key]}" -v c="${cpu[$key]}" -v gb="$gb" -v n="$images" -v b="$bytes_per_epoch" 'BEGIN {
    printf "| %s | %.0f | %.1f | %.2f |\n", k, v, v * b / n / 1e6, c / gb }'
done
