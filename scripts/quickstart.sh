#!/usr/bin/env bash
# The README's two Quick-start commands:
#   bash scripts/quickstart.sh run    set up, build (release), run the main job (mxtrain train:
#                                     bf16 vs MXFP8 training, 1-3 minutes on 2 cores)
#   bash scripts/quickstart.sh test   set up, check the formatting, build (dev: ASan + UBSan,
#                                     warnings as errors) and run every test,
#                                     then the release build's tests including the
#                                     exhaustive encoder check, the cpu_caps label and
#                                     the mpi label (two ranks under mpirun), a
#                                     project built against the installed package
#                                     (tests/consumer), then ruff over python/ and the
#                                     Python package's tests against `pip install .` in
#                                     build/venv, and
#                                     last a bounded run of each fuzz target (50 s each,
#                                     clang + libFuzzer, ASan + UBSan; docs/fuzzing.md)
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
    # Formatting is checked like a test: every C++ source as .clang-format says (clang-format
    # 14, Debian's).
    find src include cli tests train bench python/src fuzz \( -name '*.cc' -o -name '*.h' \) \
      -print0 | xargs -0 clang-format --dry-run -Werror
    echo "format: clang-format finds no differences"
    cmake --preset dev
    cmake --build --preset dev -j "$jobs"
    ctest --preset dev -j "$jobs"
    cmake --preset release
    cmake --build --preset release -j "$jobs"
    ctest --preset release -j "$jobs"
    # The library as a user's project sees it: installed, then found by find_package.
    rm -rf build/install build/consumer
    cmake --install build/release --prefix "$PWD/build/install" >/dev/null
    cmake -S tests/consumer -B build/consumer -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$PWD/build/install" >/dev/null
    cmake --build build/consumer
    build/consumer/mxtrain_consumer
    # The Python package as a user installs it: a venv over Debian's python3-torch and
    # numpy (Debian's interpreter, which those packages belong to), `pip install .`, and
    # pytest run from outside the source tree so that the installed package is imported.
    if [ ! -x build/venv/bin/python ]; then
      /usr/bin/python3 -m venv --system-site-packages build/venv
    fi
    # The Python linted as the C++ is formatted: ruff from PyPI, pinned so that its rules do
    # not change under the code ([tool.ruff] in pyproject.toml says which).
    build/venv/bin/pip install -q ruff==0.17.6
    build/venv/bin/ruff check python/
    CMAKE_BUILD_PARALLEL_LEVEL="$jobs" build/venv/bin/pip install -q .
    (cd build && MXTRAIN_CLI="$PWD/release/mxtrain" venv/bin/python -m pytest -q ../python/tests)
    bash fuzz/run.sh 50
    ;;
  *)
    echo "usage: bash scripts/quickstart.sh run|test" >&2
    exit 2
    ;;
esac
