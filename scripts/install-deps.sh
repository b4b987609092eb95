#!/usr/bin/env bash
# Installs everything dtrain needs on Debian 12 (bookworm) with apt-get,
# through sudo when not root. Idempotent: when every package is already
# installed it returns at once, without touching the network.
#
#   scripts/install-deps.sh                 install what is missing
#   scripts/install-deps.sh --demo          only what README command 1 needs:
#                                           building `dtrain` on the torch wheel
#                                           and the Fashion-MNIST demo
#   scripts/install-deps.sh --list [--demo] print the package list
#   scripts/install-deps.sh PACKAGE...      these packages (e.g. libtorch-dev
#                                           for the 1.13 fallback)
set -euo pipefail

# Build: compilers, CMake, Ninja, ccache and the libraries dtrain links.
# libgloo-dev: LibTorch 1.13's c10d Gloo headers include Gloo's.
# libtorch-dev pulls in, as Depends, the -dev packages its CMake config needs
# (libprotobuf-dev, libgoogle-glog-dev, libgflags-dev, python3-dev).
# libjpeg62-turbo-dev: libturbojpeg0-dev's CMake config (libjpeg-turbo::*)
# refers to libjpeg.a/libjpeg.so from it, but does not depend on it.
# libzmq3-dev: ZeroMQ, the parameter server's transport (ps-lite's wire
# protocol runs on ROUTER/DEALER sockets; src/ps, docs/ps.md); pkgconf:
# CMake finds libzmq through pkg-config.
# prometheus-cpp-dev: the per-rank Prometheus /metrics endpoint (src/observe).
# clang-format-14: scripts/check-format.sh (the first check of scripts/test.sh)
# formats with exactly this release, Debian 12's; others format differently.
readonly BUILD_PACKAGES=(
  build-essential cmake ninja-build ccache clang-format-14
  libtorch-dev libgloo-dev libcli11-dev nlohmann-json3-dev prometheus-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  zlib1g-dev libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev libzmq3-dev pkgconf
  # libcurl: dtrain's one HTTP stack (src/http: the object store and the etcd
  # client); the object store's OpenSSL (SigV4's SHA-256 and HMAC,
  # Content-MD5) and libexpat (S3's XML).
  libcurl4-openssl-dev libssl-dev libexpat1-dev
)
# Run time, data and the tests: the dataset, the PyTorch peer for the
# benchmark, process and network tools, MPI and etcd for the launcher's
# later rendezvous back ends, python3-venv for the venv that holds the CUDA
# torch wheel, the default LibTorch (scripts/torch-wheel.sh).
# python3-protobuf, protobuf-compiler: the observe tests decode TensorBoard
# event files with protobuf's own runtime over a .proto compiled at test time
# (an independent reader of dtrain's encoder). python3-pip: installs
# TensorBoard (not packaged by Debian) for the EventAccumulator test.
# prometheus: its promtool lints the /metrics text and its server scrapes the
# endpoint on loopback in the observe tests.
readonly RUN_PACKAGES=(
  dataset-fashion-mnist python3-torch python3-torchvision python3-numpy
  # python3-jsonschema, python3-yaml: tests/deploy validates deploy/kubernetes
  # against the operators' CRD schemas (strict JSON Schema validation).
  python3-jsonschema python3-yaml
  hyperfine iproute2 procps etcd-server openmpi-bin libopenmpi-dev python3-venv
  python3-protobuf protobuf-compiler python3-pip prometheus
  # chromium, python3-pil: tests/measure renders the scaling plot's SVG in a real
  # browser (headless) and checks the PNG's pixels at the plotted points.
  chromium python3-pil
  # ---- fuzzing, sanitizers, Slurm (issue 21; docs/fuzzing.md) ----
  # clang-14, libclang-rt-14-dev: scripts/fuzz.sh builds the libFuzzer targets
  # in fuzz/ with clang's fuzzer, ASan and UBSan runtimes.
  # slurmd, slurmctld, munge: tests/deploy/slurm_cluster.sh starts a two-node
  # Slurm (each node in its own network/UTS namespace) and submits
  # deploy/slurm/dtrain.sbatch; installing them starts no daemon here.
  clang-14 libclang-rt-14-dev slurmd slurmctld munge
)
# README command 1 (scripts/demo.sh): the `dtrain` program on the torch wheel
# (configured with DTRAIN_BUILD_TESTS and DTRAIN_BUILD_BENCH off), the
# dataset, and python3-venv for the wheel's venv. Not Debian's LibTorch, the
# tests' peers and tools, or MPI, etcd, Chromium, Slurm and clang: on a
# fresh machine they are most of the download. scripts/build.sh installs
# libtorch-dev itself when it takes the 1.13 fallback under DTRAIN_INSTALL=1.
readonly DEMO_PACKAGES=(
  build-essential cmake ninja-build ccache
  libgloo-dev libcli11-dev nlohmann-json3-dev prometheus-cpp-dev
  zlib1g-dev libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev libzmq3-dev pkgconf
  libcurl4-openssl-dev libssl-dev libexpat1-dev
  dataset-fashion-mnist python3-venv
)
PACKAGES=("${BUILD_PACKAGES[@]}" "${RUN_PACKAGES[@]}")

log() { printf '==> install-deps: %s\n' "$*"; }
die() { printf '==> install-deps: ERROR: %s\n' "$*" >&2; exit 1; }

# Prints the packages that are not fully installed.
missing_packages() {
  local p status
  for p in "${PACKAGES[@]}"; do
    # shellcheck disable=SC2016 # dpkg-query format, not a shell expansion
    status="$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)"
    [[ "$status" == installed ]] || printf '%s\n' "$p"
  done
}

# as_root CMD...: runs CMD as root, through sudo when needed.
as_root() {
  if [[ "$(id -u)" == 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo DEBIAN_FRONTEND=noninteractive "$@"
  else
    die "not root and sudo is not installed; as root run: apt-get install $*"
  fi
}

# TensorBoard, from PyPI through pip: the observe tests read dtrain's event
# files with its EventAccumulator (they skip with a message without it).
# Optional: a failure is reported, not fatal.
install_python_tools() {
  if /usr/bin/python3 -c 'import tensorboard' >/dev/null 2>&1; then
    return 0
  fi
  log "installing tensorboard with pip (for the observe tests)"
  as_root /usr/bin/python3 -m pip install -q --break-system-packages tensorboard ||
    log "WARNING: pip could not install tensorboard; its test will be skipped"
}

main() {
  local list=0 demo=0 named=() full=1
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --list) list=1 ;;
      --demo) demo=1 ;;
      -*) die "unknown option $1 (--demo, --list, or package names)" ;;
      *) named+=("$1") ;;
    esac
    shift
  done
  if [[ ${#named[@]} -gt 0 ]]; then
    PACKAGES=("${named[@]}") full=0
  elif [[ $demo == 1 ]]; then
    PACKAGES=("${DEMO_PACKAGES[@]}") full=0
  fi
  if [[ $list == 1 ]]; then
    printf '%s\n' "${PACKAGES[@]}"
    return 0
  fi
  if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    die "apt-get and dpkg-query not found: dtrain's set-up expects Debian 12"
  fi

  local missing
  mapfile -t missing < <(missing_packages)
  if [[ ${#missing[@]} -eq 0 ]]; then
    log "all ${#PACKAGES[@]} packages are installed"
    [[ $full == 0 ]] || install_python_tools
    return 0
  fi
  log "installing ${#missing[@]} missing package(s): ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -q
  as_root apt-get install -y -q --no-install-recommends "${missing[@]}"

  mapfile -t missing < <(missing_packages)
  [[ ${#missing[@]} -eq 0 ]] || die "still missing after apt-get install: ${missing[*]}"
  [[ $full == 0 ]] || install_python_tools
  log "done"
}

main "$@"
