#!/bin/sh
# Installs the Debian packages that llada.cpp needs to build and test (idempotent).
# Usage: scripts/install-deps.sh [--train] [--bench] [--web] [--fuzz] [--aarch64]
#   --train  also installs what train/ needs (PyTorch, NumPy, OpenBLAS, Jinja2 for the chat fixtures); a
#            normal build needs none of it.
#   --fuzz   also installs clang-16 and libFuzzer (scripts/fuzz.sh; the fuzz targets' replay
#            build in ctest needs neither).
#   --aarch64 also installs the arm64 cross compiler, qemu-user and the arm64 -dev packages
#            (Debian multiarch: adds the arm64 architecture) for scripts/cross-aarch64.sh.
#   --bench  also installs what bench/'s figures need (matplotlib).
#   --web    also installs the browser test's Chromium, ChromeDriver and Selenium, and (when npm is
#            on the machine) OpenAI's official `openai` client from the npm registry into
#            ~/.cache/llada.cpp/npm for the server's client test.
# Nothing is downloaded from anywhere but Debian's package archive.
set -eu

train=0
bench=0
web=0
fuzz=0
aarch64=0
for arg in "$@"; do
    case "$arg" in
        --train) train=1 ;;
        --bench) bench=1 ;;
        --web) web=1 ;;
        --fuzz) fuzz=1 ;;
        --aarch64) aarch64=1 ;;
        *) echo "install-deps.sh: unknown option '$arg' (expected --train, --bench, --web, --fuzz or --aarch64)" >&2; exit 2 ;;
    esac
done

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

pkgs="build-essential cmake pkg-config libhwy-dev libpcre2-dev libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libcpp-httplib-dev clang-format python3"
if [ "$web" -eq 1 ]; then
    pkgs="$pkgs chromium chromium-driver python3-selenium curl"
fi
if [ "$fuzz" -eq 1 ]; then
    # libclang-rt-16-dev holds the -fsanitize=fuzzer,address runtimes clang links the targets with.
    pkgs="$pkgs clang-16 libfuzzer-16-dev libclang-rt-16-dev"
fi
if [ "$aarch64" -eq 1 ]; then
    $sudo dpkg --add-architecture arm64
    pkgs="$pkgs g++-aarch64-linux-gnu qemu-user libhwy-dev:arm64 libpcre2-dev:arm64 libgtest-dev:arm64 libgmock-dev:arm64 libcpp-httplib-dev:arm64"
fi
if [ "$bench" -eq 1 ]; then
    pkgs="$pkgs python3-matplotlib"
fi
if [ "$train" -eq 1 ]; then
    # libopenblas0-openmp: Debian's default reference BLAS makes torch ~20x slower.
    pkgs="$pkgs python3-torch python3-numpy libopenblas0-openmp python3-jinja2"
fi

$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $pkgs
if [ "$web" -eq 1 ] && command -v npm > /dev/null 2>&1; then
    npm install --silent --no-audit --no-fund --prefix "${HOME:-/root}/.cache/llada.cpp/npm" openai@4 > /dev/null
fi
