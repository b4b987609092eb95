#!/usr/bin/env bash
# README command 1: set up, build, and train the CNN on Fashion-MNIST
# data-parallel across 2 worker processes.
#
#   scripts/demo.sh [EXTRA dtrain train ARGS...]   e.g. --epochs 1 --threads 1
#
# It installs (scripts/install-deps.sh --demo) and builds only what it runs,
# the `dtrain` program (not the tests, examples and benchmarks), on the
# default LibTorch: PyPI's torch wheel 2.11, set up by scripts/build.sh
# through scripts/torch-wheel.sh (the CPU library, or the CUDA build where the
# CUDA toolkit is; Debian's LibTorch 1.13 where the wheel cannot be had, with
# a line saying why, installing libtorch-dev then). DTRAIN_TORCH and the
# other variables of scripts/build.sh apply.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT

log() { printf '==> demo: %s (%d s so far)\n' "$*" "$SECONDS"; }

main() {
  cd "$REPO_ROOT"
  log "stage: install dependencies"
  bash scripts/install-deps.sh --demo
  log "stage: build"
  # Without the tests and benchmarks CMake needs none of their packages;
  # scripts/test.sh turns them back on in the same build folder.
  DTRAIN_INSTALL="${DTRAIN_INSTALL:-1}" DTRAIN_BUILD_TARGETS=dtrain bash scripts/build.sh \
    -DDTRAIN_BUILD_TESTS=OFF -DDTRAIN_BUILD_BENCH=OFF
  log "stage: train (2 processes)"
  local dtrain="${DTRAIN_BUILD_DIR:-${REPO_ROOT}/build}/dtrain"
  exec "$dtrain" run --nproc-per-node 2 -- \
    "$dtrain" train --model cnn --dataset fashion-mnist --epochs 3 "$@"
}

main "$@"
