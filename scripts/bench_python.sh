#!/usr/bin/env bash
# The Python benchmark (docs/python.md "Benchmark") against the two torches a user may have,
# in one run: Debian's python3-torch (build/venv, as `quickstart.sh test` makes it) and
# PyTorch 2.x from the Python registry (build/bench-venv; a large download the first time,
# skipped once it is there). Each runs `python -m mxtrain.bench`, which times mxtrain and
# that torch in the same process and names torch's BLAS on its first line.
#
#   bash scripts/bench_python.sh [python -m mxtrain.bench arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
jobs="$(nproc)"

if [ ! -x build/venv/bin/python ]; then
  /usr/bin/python3 -m venv --system-site-packages build/venv
fi
if [ ! -x build/bench-venv/bin/python ]; then
  /usr/bin/python3 -m venv build/bench-venv
fi
if ! build/bench-venv/bin/python -c 'import torch, numpy' 2>/dev/null; then
  build/bench-venv/bin/pip install -q "torch>=2" numpy
fi
for venv in venv bench-venv; do
  CMAKE_BUILD_PARALLEL_LEVEL="$jobs" "build/$venv/bin/pip" install -q .
done
# Run from outside the source tree so that the installed packages are imported.
for venv in venv bench-venv; do
  echo "# build/$venv"
  (cd build && "$venv/bin/python" -m mxtrain.bench "$@")
done
