#!/usr/bin/env bash
# Issue 5: images/sec of decode + RandomResizedCrop(224) + flip + normalise,
# dtrain's ImageLoader vs torchvision ImageFolder + DataLoader, at 1 and 2
# worker threads / processes, plus the packed format against the folder.
#
#   bench/loader/loader_vs_torchvision.sh [--build build] [--bench PATH] [--data DIR]
#                                         [--images N] [--epochs E] [--repeat R]
#                                         [--timeout SECS]
#
# Every configuration runs R times (default 3), interleaved, and the best rate
# is kept: on a shared machine the best run is the one least disturbed.
# --bench defaults to BUILD/bench/bench_loader (built with -DDTRAIN_BUILD_BENCH=ON).
# The peer is the PyTorch/torchvision of BUILD/dtrain's LibTorch version
# (bench/peer_python.sh: the venv of scripts/peer-torch.sh for 2.x, /usr/bin/python3
# for Debian's 1.13; DTRAIN_PEER_PYTHON overrides); both versions are printed.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=bench/peer_python.sh
source "$root/bench/peer_python.sh"
build="$root/build"
data="${TMPDIR:-/tmp}/dtrain-loader-bench"
images=1000
epochs=2
limit=900
repeat=3
bench=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --bench) bench="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    --images) images="$2"; shift 2 ;;
    --epochs) epochs="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --timeout) limit="$2"; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
bench="${bench:-$build/bench/bench_loader}"
[[ -x "$bench" ]] || { echo "missing $bench; build with -DDTRAIN_BUILD_BENCH=ON" >&2; exit 1; }
peer_select "$build/dtrain" || exit 1
py=("${PEER_ENV[@]}" "$PEER_PY")
peer_versions

folder="$data/folder"
packed="$data/packed"
if [[ ! -f "$folder/.complete-$images" ]]; then
  rm -rf "$folder" "$packed"
  echo "generating $images JPEGs (500x375) in $folder"
  timeout "$limit" "${py[@]}" "$here/make_jpegs.py" "$folder" --classes 10 --per-class $((images / 10))
  touch "$folder/.complete-$images"
fi
if [[ ! -f "$packed/index.bin" ]]; then
  timeout "$limit" "$build/dtrain" data pack "$folder" "$packed" --shard-size-mb 64
fi
echo "dataset: $(find "$folder" -name '*.JPEG' | wc -l) JPEGs, $(du -sh "$folder" | cut -f1)"
echo "load before: $(uptime)"
nproc_cpus=$(nproc)
echo "cpus: $nproc_cpus  ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"

# Every configuration runs once per round, $repeat rounds, and keeps its best
# rate: load from other processes drifts over minutes, so interleaving spreads
# it evenly over the configurations instead of penalising the last ones.
declare -A cmd r
for n in 1 2; do
  cmd[tv$n]="${py[*]} $here/torchvision_loader.py $folder --workers $n --epochs $epochs"
  cmd[df$n]="$bench $folder --threads $n --epochs $epochs"
  cmd[dp$n]="$bench $packed --packed --threads $n --epochs $epochs"
done
for variant in no-dct no-region uint8; do
  cmd[$variant]="$bench $folder --threads 1 --$variant --epochs $epochs"
done
order=(tv1 df1 dp1 no-dct no-region uint8 tv2 df2 dp2)
for ((round = 0; round < repeat; round++)); do
  for key in "${order[@]}"; do
    load=$(cut -d' ' -f1 /proc/loadavg)  # the 1-minute load before this run
    line=$(timeout "$limit" ${cmd[$key]})
    echo "round $((round + 1)) $key (load before $load): $line" >&2
    v=$(sed -n 's/.*images_per_sec=\([0-9.]*\).*/\1/p' <<<"$line")
    r[$key]=$(awk -v a="${r[$key]:-0}" -v b="$v" 'BEGIN { print (b > a ? b : a) }')
  done
done
echo "load after: $(uptime)"
echo
echo "| workers | torchvision img/s | dtrain folder img/s | ratio | dtrain packed img/s | packed/folder |"
echo "|---|---|---|---|---|---|"
for n in 1 2; do
  awk -v n=$n -v tv="${r[tv$n]}" -v df="${r[df$n]}" -v dp="${r[dp$n]}" 'BEGIN {
    printf "| %d | %.0f | %.0f | %.2fx | %.0f | %.2fx |\n", n, tv, df, df / tv, dp, dp / df }'
done
echo
echo "| dtrain, 1 thread, folder | img/s | vs default |"
echo "|---|---|---|"
for variant in default no-dct no-region uint8; do
  v="${r[$variant]:-${r[df1]}}"
  awk -v name="$variant" -v v="$v" -v d="${r[df1]}" 'BEGIN {
    printf "| %s | %.0f | %.2fx |\n", name, v, v / d }'
done
