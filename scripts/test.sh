#!/usr/bin/env bash
# The project's test command (README): every test tier that can run on this
# machine. A tier that cannot run says so loudly; it never passes silently.
#
#   RELINK_SIM_SEEDS=N   seeds of the randomized simulation (default 2000)
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "unit, property, conformance (soft in-process + TCP), simulation, multi-process tests"
cargo test --workspace --release

step "benchmarks still run (quick mode; figures come from the full runs in docs/BENCHMARKS.md)"
RELINK_BENCH_QUICK=1 cargo bench -p relink-bench

step "real RDMA tier (rdma-core on Soft-RoCE in a VM)"
echo "SKIPPED: the rdma-core provider and the VM tier are not built yet (issue #4);"
echo "         nothing of this tier ran."
