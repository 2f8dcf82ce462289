#!/usr/bin/env bash
# Build the libfabric provider (crates/relink-ofi) and install it as
# DIR/librelink-fi.so, where libfabric finds it:
#
#   scripts/install-ofi.sh DIR           then: export FI_PROVIDER_PATH=DIR
#   scripts/install-ofi.sh               into libfabric's own provider
#                                        directory (Debian:
#                                        /usr/lib/<arch>/libfabric), which
#                                        libfabric scans when
#                                        FI_PROVIDER_PATH is unset
#   scripts/install-ofi.sh [DIR] --verbs with the rdma-core backend
#                                        (FI_RELINK_BACKEND=verbs; needs
#                                        libibverbs-dev, librdmacm-dev)
#
# Then `fi_info -p relink` lists it; README.md, "Run MPI over relink",
# says the rest.
set -euo pipefail
dir=""
features=()
for a in "$@"; do
    case $a in
        --verbs) features=(--features verbs) ;;
        -*) echo "usage: $0 [DIR] [--verbs]" >&2; exit 2 ;;
        *) [[ -z $dir ]] || { echo "usage: $0 [DIR] [--verbs]" >&2; exit 2; }; dir=$a ;;
    esac
done
if [[ -z $dir ]]; then
    libdir=$(pkg-config --variable=libdir libfabric 2>/dev/null || true)
    [[ -n $libdir ]] || libdir=/usr/lib/$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)
    dir=$libdir/libfabric
fi
repo=$(cd "$(dirname "$0")/.." && pwd)
cargo=${CARGO:-cargo}
(cd "$repo" && "$cargo" build --release -p relink-ofi "${features[@]}")
target=${CARGO_TARGET_DIR:-$repo/target}
case $target in /*) ;; *) target=$repo/$target ;; esac
mkdir -p "$dir"
install -m 0755 "$target/release/librelink_fi.so" "$dir/librelink-fi.so"
echo "installed the relink libfabric provider as $dir/librelink-fi.so"
