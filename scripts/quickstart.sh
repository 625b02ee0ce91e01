#!/usr/bin/env bash
# The README's two Quick-start commands:
#   bash scripts/quickstart.sh run    set up, build (release), run the main job (mxtrain train:
#                                     bf16 vs MXFP8 training, 1-3 minutes on 2 cores)
#   bash scripts/quickstart.sh test   set up, build (dev: ASan + UBSan) and run every test,
#                                     then the release build's tests including the
#                                     exhaustive encoder check
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-}"
jobs="$(nproc)"

bash scripts/setup.sh

case "$mode" in
  run)
    cmake --preset release >/dev/null
    cmake --build --preset release -j "$jobs" --target mxtrain_cli
    ./build/release/mxtrain train
    ;;
  test)
    cmake --preset dev
    cmake --build --preset dev -j "$jobs"
    ctest --preset dev -j "$jobs"
    cmake --preset release
    cmake --build --preset release -j "$jobs"
    ctest --preset release -j "$jobs"
    ;;
  *)
    echo "usage: bash scripts/quickstart.sh run|test" >&2
    exit 2
    ;;
esac
