#!/usr/bin/env bash
# Prepares mpi4py's own test suite for the libfabric provider's tests
# (crates/relink-ofi/tests/mpi4py.rs): mpi4py's sdist from PyPI, built
# against the installed Open MPI (libopenmpi-dev) in a venv.
#
#   scripts/mpi4py.sh [DIR]    (default: target/mpi4py)
#
# Leaves DIR/venv (python with mpi4py) and DIR/mpi4py-VERSION/test (the
# suite), and prints DIR. A DIR made before is used as it is. Needs the
# network to PyPI the first time (~2 min to fetch, ~3 min to build here).
set -euo pipefail
version=4.1.2
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-${CARGO_TARGET_DIR:-$repo/target}/mpi4py}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
if [[ -f $dir/mpi4py-$version/test/main.py ]] &&
    "$dir/venv/bin/python" -c 'import mpi4py.MPI' 2>/dev/null; then
    echo "$dir"
    exit 0
fi
{
    python3 -m venv "$dir/venv"
    # Only mpi4py from its source (its build tools as wheels).
    "$dir/venv/bin/pip" download --quiet --no-deps --no-binary mpi4py \
        "mpi4py==$version" -d "$dir/dl"
    tar xzf "$dir/dl/mpi4py-$version.tar.gz" -C "$dir"
    "$dir/venv/bin/pip" install --quiet "$dir/dl/mpi4py-$version.tar.gz"
} >&2
echo "$dir"
