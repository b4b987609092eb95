#!/usr/bin/env bash
# Runs the rendezvous benchmark (N agents forming one round through the
# embedded TCP store) for N = 16, 64, 256. Builds nothing.
#
#   bench/rendezvous/run.sh [BUILD_DIR] [--repeat R] [--mode threads|processes] [N ...]
#
# Side by side with torch's dynamic rendezvous: rendezvous_vs_torch.sh.
#
# BUILD_DIR defaults to ./build; the binary is BUILD_DIR/bench/rendezvous_bench.
set -euo pipefail

build=${1:-build}
[[ $# -gt 0 ]] && shift
bin="$build/bench/rendezvous_bench"
if [[ ! -x "$bin" ]]; then
  echo "run.sh: $bin not found; build it first: cmake --build $build --target rendezvous_bench" >&2
  exit 2
fi
args=("$@")
[[ ${#args[@]} -eq 0 ]] && args=(16 64 256)

echo "# load before: $(uptime)"
# The agents are threads of one process (or its children); bound the whole run.
timeout --kill-after=10 600 "$bin" "${args[@]}"
echo "# load after: $(uptime)"
