#!/usr/bin/env bash
# The project's test command (README): every test tier that can run here.
# A tier that cannot run says so loudly instead of passing silently.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --release
