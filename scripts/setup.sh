#!/usr/bin/env bash
# Installs what mxtrain needs to build and test, from Debian's packages; skips whatever is
# already installed. Run as root (or with sudo available). Idempotent.
set -euo pipefail

packages=(
  build-essential  # g++ 12 (C++20)
  cmake            # >= 3.25
  ninja-build
  clang-format     # 14: the formatting check of the test command (.clang-format)
  libhwy-dev       # Google Highway: SIMD written once, dispatched at run time
  libgtest-dev     # GoogleTest
  libbenchmark-dev # Google Benchmark
  libdnnl-dev      # oneDNN 2.6: the bf16 matmul baseline of `mxtrain bench gemm` (optional to the build)
  nlohmann-json3-dev # nlohmann/json 3.11: safetensors headers and summary.json (header-only)
  libcli11-dev     # CLI11 2.1: the flags of the mxtrain command (header-only)
  # Open MPI 4.1: mpirun and the MPI library behind the communicator (comm.h), for
  # `mpirun -np 2 mxtrain train --expert-parallel 2` (optional to the build: MXTRAIN_WITH_MPI).
  openmpi-bin
  libopenmpi-dev
  # The Python package (README "Python"): built by pip into a venv that sees these.
  python3-dev
  python3-venv
  python3-pip
  python3-numpy
  python3-pytest
  python3-torch    # PyTorch 1.13 (mxtrain.torch; PyTorch 2.x from pip works as well)
  pybind11-dev
  # The fuzz targets (fuzz/, docs/fuzzing.md): clang and its runtime, which holds libFuzzer
  # and the sanitizers' clang builds.
  clang-14
  libclang-rt-14-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
