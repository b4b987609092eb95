#!/usr/bin/env bash
# The one command for a lent GPU machine (H100/H200, torch 2.11 + CUDA 13 in
# its python3, nvcc, CMake, ninja, 16 cores; no network, no apt): builds dtrain
# against that machine's torch, runs the unit tests (the GPU tests no longer
# skip), then the GPU benchmarks that exist, and writes every log to $OUT.
#
#   bash scripts/gpu-check.sh download   HERE (Debian 12, network): fetch the
#                                        Debian packages the GPU machine lacks
#                                        into .gpu-debs/ (git ignores it)
#   bash scripts/gpu-check.sh            THERE, with .gpu-debs/ carried along:
#                                        unpack, configure, build, ctest, bench
#   bash scripts/gpu-check.sh configure  only unpack and configure (a quick check)
#
# The GPU machine lacks the libraries dtrain builds with from Debian
# (nlohmann-json, CLI11, GoogleTest, libturbojpeg, libpng, zlib, ZeroMQ,
# prometheus-cpp; DEB_PACKAGES lists them and why), pkg-config, and Gloo's
# headers, which c10d's ProcessGroupGloo.hpp includes and the torch wheel does
# not ship. They are unpacked with `dpkg -x` into a prefix (never /) that goes
# into CMAKE_PREFIX_PATH, the compiler's include path and the carried
# pkg-config's sysroot. The programs find the carried libraries, like the
# wheel's, through their RPATH (Note [RPATH to the wheel] in CMakeLists.txt).
# Each step's output is tee'd to $OUT/<step>.log under pipefail, so a time-out
# still leaves the logs; $OUT/summary.txt lists every step and its result.
# Plan: build ~3 min at -j16, GPU tests ~1 min, benchmarks ~3 min, the other
# unit tests ~3 min.
#
# Environment:
#   OUT                 output folder            (default /tmp/dtrain-gpu-check)
#   DTRAIN_GPU_DEBS     the carried .deb files    (default <repo>/.gpu-debs)
#   DTRAIN_GPU_PREFIX   where they are unpacked   (default /tmp/dtrain-gpu-prefix)
#   DTRAIN_GPU_BUILD    build dir                 (default <repo>/build-gpu)
#   DTRAIN_GPU_PYTHON   Python that has torch     (default python3; also the
#                       PyTorch peer's, passed on as DTRAIN_PEER_PYTHON)
#   DTRAIN_GPU_PEAK_TFLOPS  the GPU's dense bf16/fp16 peak for the share
#                       printed beside achieved TFLOP/s (default 989: H100
#                       and H200 SXM datasheets)
#   DTRAIN_CUDA_HOME    CUDA toolkit              (default: from nvcc on PATH, else /usr/local/cuda)
#   DTRAIN_TORCH_CUDA_ARCH_LIST  TORCH_CUDA_ARCH_LIST (default 9.0, Hopper)
#   DTRAIN_JOBS         build and test jobs       (default nproc)
#   DTRAIN_GPU_CTEST_ARGS  ctest selection        (default "-L unit")
#   DTRAIN_GPU_TESTS    regex of the tests that need a GPU, run first
#                       (default "Cuda|Gpu|Nccl")
#   DTRAIN_GPU_SKIP_BENCH=1  stop after the tests
#   DTRAIN_GPU_BENCH    all (default): ResNet-50 and the bench/gpu scripts;
#                       scripts: only the bench/gpu scripts
#   DTRAIN_GPU_SCRIPT_TIMEOUT  seconds each bench/gpu script may run (300)
#   DTRAIN_GPU_SKIP_UNIT=1  leave out the tests that do not need a GPU
#   DTRAIN_GPU_BUNDLE   a .tgz path: after every step $OUT's logs are packed
#                       into it and summary.txt copied beside it. The device
#                       tool brings back at most 8 files from its $OUT, so
#                       there: R=$OUT; OUT=/tmp/gc DTRAIN_GPU_BUNDLE=$R/gpu-check.tgz
#                       timeout 560 bash scripts/gpu-check.sh (a step cut off
#                       by the timeout still leaves the bundle of those before)
set -uo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
readonly DEBS="${DTRAIN_GPU_DEBS:-${REPO_ROOT}/.gpu-debs}"
readonly PREFIX="${DTRAIN_GPU_PREFIX:-/tmp/dtrain-gpu-prefix}"
readonly BUILD="${DTRAIN_GPU_BUILD:-${REPO_ROOT}/build-gpu}"
readonly PYTHON="${DTRAIN_GPU_PYTHON:-python3}"
readonly ARCH_LIST="${DTRAIN_TORCH_CUDA_ARCH_LIST:-9.0}"
readonly JOBS="${DTRAIN_JOBS:-$(nproc)}"
readonly CTEST_ARGS="${DTRAIN_GPU_CTEST_ARGS:--L unit}"
readonly GPU_TESTS="${DTRAIN_GPU_TESTS:-Cuda|Gpu|Nccl}"
OUT="${OUT:-/tmp/dtrain-gpu-check}"
readonly MULTIARCH=x86_64-linux-gnu

# Every Debian package the build needs and the GPU machine lacks: the -dev
# packages dtrain builds with, the run-time libraries of those that are not
# header-only (their .so symlinks point into them, and the tests load them),
# and what their CMake and pkg-config files ask for. Left out: what every
# Linux with a compiler has (libc6, libstdc++6, libgcc-s1).
#   JSON, CLI11, GoogleTest, Gloo's headers (the wheel lacks include/gloo),
#   zlib, JPEG and PNG: the components' own finds.
#   ZeroMQ (src/ps): libzmq3-dev through pkg-config, and libzmq5's libraries.
#   prometheus-cpp (src/observe): its CMake package finds civetweb (whose
#   targets name the civetweb program), CURL (for prometheus-cpp::push, not
#   linked) and zlib, and checks that every library of its targets exists.
#   libcurl (src/http, the one HTTP stack), OpenSSL (HMAC for SigV4) and expat
#   (S3's XML): src/objstore.
#   The libraries libcurl loads, down to the last one (brotli .. libffi8: the
#   closure of readelf's NEEDED over the carried files, less glibc, libstdc++
#   and libgcc): the linker resolves them when it links a program.
#   pkgconf: CMake's FindPkgConfig needs a pkg-config program; the carried
#   one is used, so the machine's (if any) plays no part.
#   iproute2 (ip, tc) and the libraries they load (libbpf1 .. libxtables12;
#   zlib, libbsd and libmd are above): bench/gpu's shaped link, two network
#   namespaces joined by a veth pair (bench/netns/netns.sh); the machine has
#   neither program. Wrapped in $PREFIX/netbin so that only they see the
#   carried libraries.
readonly DEB_PACKAGES=(
  nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev libgloo-dev
  zlib1g-dev zlib1g libturbojpeg0-dev libturbojpeg0 libjpeg62-turbo-dev libjpeg62-turbo
  libpng-dev libpng16-16
  libzmq3-dev libzmq5 libsodium23 libpgm-5.3-0 libnorm1 libbsd0 libmd0
  libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2
  prometheus-cpp-dev libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0
  libcivetweb-dev libcivetweb1 civetweb libcurl4-openssl-dev libcurl4
  libbrotli1 libssl3 libidn2-0 libldap-2.5-0 libnghttp2-14 libpsl5 librtmp1 libssh2-1
  libzstd1 libgmp10 libgnutls30 libhogweed6 libnettle8 libsasl2-2 libunistring2
  libp11-kit0 libtasn1-6 libffi8 libssl-dev libexpat1-dev libexpat1
  pkgconf pkgconf-bin libpkgconf3
  iproute2 libbpf1 libelf1 libmnl0 libcap2 libxtables12
)

STEPS=()   # "name|status|seconds"
FAILED=0

log() { printf '==> gpu-check: %s\n' "$*"; }
die() { printf '==> gpu-check: ERROR: %s\n' "$*" >&2; exit 1; }

# step NAME CMD...: runs CMD with its output tee'd to $OUT/NAME.log and
# records the result; returns CMD's status.
step() {
  local name="$1" start=$SECONDS rc=0
  shift
  log "step: $name"
  ( set -o pipefail; ( "$@" ) 2>&1 | tee "$OUT/$name.log" ) || rc=$?
  if [[ $rc -eq 0 ]]; then
    STEPS+=("$name|ok|$((SECONDS - start))")
  else
    STEPS+=("$name|FAILED (exit $rc)|$((SECONDS - start))")
    FAILED=1
    log "step FAILED: $name (exit $rc; log $OUT/$name.log)"
  fi
  write_summary
  return "$rc"
}

write_summary() {
  local entry name status secs
  {
    printf 'dtrain gpu-check, %s, commit %s\n' "$(date -u +%FT%TZ)" \
      "$(git -C "$REPO_ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
    for entry in "${STEPS[@]}"; do
      IFS='|' read -r name status secs <<<"$entry"
      printf '  %-28s %-20s %6ss\n' "$name" "$status" "$secs"
    done
    local t
    for t in ctest-gpu ctest; do
      [[ -s "$OUT/$t.log" ]] || continue
      printf '\n%s:\n' "$t"
      # "100% tests passed, 0 tests failed out of 27", or without the
      # failures' count when none failed and some were skipped (seen on the H200).
      sed -n '/tests passed/,$p' "$OUT/$t.log" |
        grep -E 'tests passed|The following tests|^[[:space:]]+[0-9]+ - |Total Test time' | sed 's/^/  /'
    done
  } >"$OUT/summary.txt"
  if [[ -n "${DTRAIN_GPU_BUNDLE:-}" ]]; then
    tar czf "$DTRAIN_GPU_BUNDLE.tmp" -C "$OUT" . && mv "$DTRAIN_GPU_BUNDLE.tmp" "$DTRAIN_GPU_BUNDLE"
    cp "$OUT/summary.txt" "$(dirname "$DTRAIN_GPU_BUNDLE")/summary.txt"
  fi
}

# ---- download (on the Debian 12 machine) -------------------------------------

download() {
  command -v apt-get >/dev/null 2>&1 || die "apt-get not found: run 'download' on the Debian 12 machine"
  mkdir -p "$DEBS"
  rm -f "$DEBS"/*.deb
  (cd "$DEBS" && apt-get download "${DEB_PACKAGES[@]}") || die "apt-get download failed"
  log "$(find "$DEBS" -name '*.deb' | wc -l) packages, $(du -sh "$DEBS" | cut -f1) in $DEBS"
  log "carry it to the GPU machine (run tool: carry [\".gpu-debs\"]) and run: bash scripts/gpu-check.sh"
}

# ---- on the GPU machine ----------------------------------------------------------

TORCH_DIR=""
CUDA_HOME=""

info() {
  set -x
  nvidia-smi || true
  nproc
  free -g || true
  command -v nvcc && nvcc --version
  cmake --version | head -1
  ninja --version
  "${CXX:-c++}" --version | head -1
  "$PYTHON" -c 'import torch, torch.utils
print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())
print("nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else "-")
print("cudnn", torch.backends.cudnn.version())
print("cmake_prefix_path", torch.utils.cmake_prefix_path)'
}

find_torch() {
  # find_spec, not import: the folder is all CMake needs (a venv holding the
  # wheel with --no-deps, as in the rehearsal, cannot import torch).
  TORCH_DIR="$("$PYTHON" -c 'import importlib.util, os
spec = importlib.util.find_spec("torch")
print(os.path.dirname(spec.origin) if spec and spec.origin else "")')" || TORCH_DIR=""
  [[ -n "$TORCH_DIR" ]] || die "$PYTHON has no torch package; set DTRAIN_GPU_PYTHON"
  [[ -f "$TORCH_DIR/share/cmake/Torch/TorchConfig.cmake" ]] || die "no TorchConfig.cmake under $TORCH_DIR"
  if [[ -n "${DTRAIN_CUDA_HOME:-}" ]]; then
    CUDA_HOME="$DTRAIN_CUDA_HOME"
  elif command -v nvcc >/dev/null 2>&1; then
    CUDA_HOME="$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")"
  else
    CUDA_HOME=/usr/local/cuda
  fi
  [[ -x "$CUDA_HOME/bin/nvcc" ]] || die "no nvcc in $CUDA_HOME/bin; set DTRAIN_CUDA_HOME"
}

# deb_extract DEB DIR: `dpkg -x`, or where dpkg is missing the same with
# Python (a .deb is an ar archive holding data.tar.xz).
deb_extract() {
  if command -v dpkg >/dev/null 2>&1; then
    dpkg -x "$1" "$2"
    return
  fi
  "$PYTHON" - "$1" "$2" <<'PY'
import io, sys, tarfile
deb, dest = sys.argv[1], sys.argv[2]
data = open(deb, "rb").read()
assert data[:8] == b"!<arch>\n", deb + " is not a .deb"
pos = 8
while pos < len(data):
    name = data[pos:pos + 16].decode().strip().rstrip("/")
    size = int(data[pos + 48:pos + 58].decode().strip())
    body = data[pos + 60:pos + 60 + size]
    if name.startswith("data.tar"):
        with tarfile.open(fileobj=io.BytesIO(body)) as t:
            t.extractall(dest)
        break
    pos += 60 + size + (size % 2)
else:
    sys.exit(deb + ": no data.tar member")
PY
}

unpack() {
  local debs=("$DEBS"/*.deb) d link target
  [[ -e "${debs[0]}" ]] || die "no .deb files in $DEBS: run 'bash scripts/gpu-check.sh download' on the Debian machine and carry .gpu-debs"
  rm -rf "$PREFIX"
  mkdir -p "$PREFIX"
  for d in "${debs[@]}"; do
    deb_extract "$d" "$PREFIX" || die "cannot unpack $d"
    echo "unpacked ${d##*/}"
  done
  # Absolute symlinks (libz.so -> /lib/.../libz.so.1.2.13) point into the
  # prefix instead.
  while IFS= read -r link; do
    target="$(readlink "$link")"
    if [[ -e "$PREFIX$target" ]]; then
      ln -sfn "$PREFIX$target" "$link"
      echo "relinked ${link#"$PREFIX"} -> $PREFIX$target"
    fi
  done < <(find "$PREFIX" -type l -lname '/*')
  # libzmq.pc's Requires.private (krb5-gssapi, libsodium, openpgm, norm,
  # libbsd) are for static links; pkg-config still wants their .pc files. The
  # shared libzmq.so.5 names its own libraries, so the line goes.
  sed -i '/^Requires.private:/d' "$PREFIX/usr/lib/$MULTIARCH/pkgconfig/libzmq.pc" ||
    die "no libzmq.pc in the carried packages"
  # The carried pkgconf, with its library and only the prefix's .pc files,
  # whose /usr paths it prefixes with the prefix.
  cat >"$PREFIX/pkg-config" <<EOF
#!/bin/sh
export LD_LIBRARY_PATH="$PREFIX/usr/lib/$MULTIARCH\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export PKG_CONFIG_SYSROOT_DIR="$PREFIX"
export PKG_CONFIG_LIBDIR="$PREFIX/usr/lib/$MULTIARCH/pkgconfig:$PREFIX/usr/share/pkgconfig"
exec "$PREFIX/usr/bin/pkgconf" "\$@"
EOF
  chmod +x "$PREFIX/pkg-config"
  "$PREFIX/pkg-config" --modversion libzmq || die "the carried pkgconf cannot read libzmq.pc"
  # ip and tc, each seeing the carried libraries where nothing else does.
  # What `ip netns exec` starts inherits that LD_LIBRARY_PATH: bench/gpu
  # scripts give their workers back their own.
  mkdir -p "$PREFIX/netbin"
  local tool bin
  for tool in ip tc; do
    bin="$PREFIX/sbin/$tool"
    [[ -x "$bin" ]] || bin="$PREFIX/bin/$tool"
    [[ -x "$bin" ]] || { echo "no $tool in the carried packages: no shaped link"; continue; }
    cat >"$PREFIX/netbin/$tool" <<EOF
#!/bin/sh
export LD_LIBRARY_PATH="$PREFIX/usr/lib/$MULTIARCH:$PREFIX/lib/$MULTIARCH"
exec "$bin" "\$@"
EOF
    chmod +x "$PREFIX/netbin/$tool"
    "$PREFIX/netbin/$tool" -V || echo "the carried $tool does not run"
  done
  if [[ -d "$TORCH_DIR/include/gloo" ]]; then
    echo "torch ships include/gloo: Debian's Gloo headers stay unused"
  else
    [[ -f "$PREFIX/usr/include/gloo/config.h" ]] || die "torch lacks include/gloo and no libgloo-dev was carried"
    echo "torch lacks include/gloo: Debian's libgloo-dev headers are used"
  fi
}

configure() {
  cmake -S "$REPO_ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    "-DPKG_CONFIG_EXECUTABLE=$PREFIX/pkg-config" \
    "-DCMAKE_PREFIX_PATH=$TORCH_DIR;$TORCH_DIR/share/cmake;$PREFIX/usr" \
    "-DCMAKE_LIBRARY_PATH=$PREFIX/usr/lib/$MULTIARCH" \
    "-DCMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES=$PREFIX/usr/include;$PREFIX/usr/include/$MULTIARCH" \
    "-DCUDAToolkit_ROOT=$CUDA_HOME" "-DCMAKE_CUDA_COMPILER=$CUDA_HOME/bin/nvcc" \
    "-DTORCH_CUDA_ARCH_LIST=$ARCH_LIST" \
    -DDTRAIN_REQUIRE_CUDA=ON -DDTRAIN_BUILD_BENCH=OFF -DDTRAIN_USE_CCACHE=OFF
}

build() {
  cmake --build "$BUILD" -j "$JOBS"
}

# run_ctest ARGS...: ctest over the build with the given selection.
run_ctest() {
  timeout --kill-after=30 900 ctest --test-dir "$BUILD" --output-on-failure --no-tests=error \
    -j "$((JOBS / 2 > 0 ? JOBS / 2 : 1))" --timeout 300 "$@"
}

# bench_if NAME SUBCOMMAND SECONDS ARGS...: runs `dtrain ARGS...` when
# `dtrain bench SUBCOMMAND --help` works (the benchmark exists in this tree).
bench_if() {
  local name="$1" sub="$2" secs="$3"
  shift 3
  if ! "$BUILD/dtrain" bench "$sub" --help >/dev/null 2>&1; then
    STEPS+=("$name|skipped: no 'bench $sub'|0")
    return 0
  fi
  step "$name" timeout --kill-after=10 "$secs" "$BUILD/dtrain" "$@" || true
}

benchmarks() {
  local gpus
  gpus="$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)"
  [[ "${DTRAIN_GPU_BENCH:-all}" == scripts ]] || resnet50_benchmarks "$gpus"
  # Scripts others add for the GPU (e.g. dtrain beside PyTorch eager) live in
  # bench/gpu/; each gets the build dir, its own output folder, the peer's
  # Python (the machine's) and the carried ip and tc on its PATH.
  local script secs="${DTRAIN_GPU_SCRIPT_TIMEOUT:-300}"
  for script in "$REPO_ROOT"/bench/gpu/*.sh; do
    [[ -f "$script" ]] || continue
    mkdir -p "$OUT/${script##*/}.out"
    step "bench-${script##*/}" env DTRAIN_BUILD_DIR="$BUILD" DTRAIN_GPU_OUT="$OUT/${script##*/}.out" \
      DTRAIN_PEER_PYTHON="$PYTHON" PATH="$PREFIX/netbin:$PATH" timeout --kill-after=10 "$secs" bash "$script" || true
  done
}

# resnet50_benchmarks GPUS: ResNet-50 AMP training, alone and beside PyTorch eager.
resnet50_benchmarks() {
  local gpus="$1"
  local d="$BUILD/dtrain"
  local train=(bench train --model resnet50 --batch-size 256 --channels-last --steps 50)
  bench_if bench-train-bf16 train 240 run --nproc-per-node 1 -- "$d" "${train[@]}" --amp bf16
  bench_if bench-train-fp16 train 240 run --nproc-per-node 1 -- "$d" "${train[@]}" --amp fp16
  if ((gpus >= 2)); then
    bench_if "bench-train-bf16-${gpus}gpu" train 300 run --nproc-per-node gpu -- "$d" "${train[@]}" --amp bf16
    # --backend auto is NCCL on CUDA builds with a GPU per rank, so this is nccl-tests' table.
    bench_if "bench-collective-nccl-${gpus}gpu" collective 180 run --nproc-per-node gpu -- \
      "$d" bench collective -b 8 -e 268435456 -f 4
  fi
  # dtrain beside PyTorch eager (the machine's torch and torchvision), same run, ratio.
  local amp
  for amp in bf16 fp16; do
    step "train-vs-pytorch-$amp" timeout --kill-after=10 400 env DTRAIN_PEER_PYTHON="$PYTHON" \
      DTRAIN_PEAK_TFLOPS="${DTRAIN_GPU_PEAK_TFLOPS:-989}" bash "$REPO_ROOT/bench/train_vs_pytorch.sh" \
      --synthetic --model resnet50 --batch-size 256 --image-size 224 --amp "$amp" --channels-last \
      --nproc 1 --steps 30 --warmup-steps 5 --rounds 1 --device cuda --build "$BUILD" || true
  done
}

main() {
  local cmd="${1:-all}"
  case "$cmd" in
    download) download; return ;;
    all | configure) ;;
    -h | --help)
      sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
      return 0
      ;;
    *) die "unknown command '$cmd' (download, configure, or none)" ;;
  esac
  mkdir -p "$OUT" || die "cannot create $OUT"
  log "logs in $OUT"
  step info info || true
  find_torch
  step unpack unpack || { log "stopping: unpack failed"; return 1; }
  step configure configure || { log "stopping: configure failed"; return 1; }
  [[ "$cmd" == configure ]] && return 0
  step build build || { log "stopping: build failed"; return 1; }
  # The tests that skip without a GPU first, then the benchmarks, then the
  # rest of the selection: what only this machine can show comes first, in
  # case the lease runs out.
  local args
  read -r -a args <<<"$CTEST_ARGS"
  step ctest-gpu run_ctest -R "$GPU_TESTS" || true
  [[ "${DTRAIN_GPU_SKIP_BENCH:-0}" == 1 ]] || benchmarks
  [[ "${DTRAIN_GPU_SKIP_UNIT:-0}" == 1 ]] || step ctest run_ctest "${args[@]}" -E "$GPU_TESTS" || true
  write_summary
  cat "$OUT/summary.txt"
  return "$FAILED"
}

main "$@"
