#!/usr/bin/env bash
# Build librelink (the C API, crates/relink-c) and install it into PREFIX:
#   PREFIX/lib/librelink.so, PREFIX/lib/librelink.a,
#   PREFIX/include/relink.h         the API
#   PREFIX/include/relink_soft.h    the soft fabric's fault hooks (tests, demos;
#                                   librelink's default `soft` feature)
#   PREFIX/lib/pkgconfig/relink.pc  -I PREFIX/include finds both headers
# Then: cc prog.c $(PKG_CONFIG_PATH=PREFIX/lib/pkgconfig pkg-config --cflags --libs relink)
#
#   scripts/install-c.sh PREFIX            the soft fabric (in-process and TCP),
#                                          its fault hooks included
#   scripts/install-c.sh PREFIX --verbs    and the rdma-core provider
#                                          (needs libibverbs-dev, librdmacm-dev)
set -euo pipefail
if [[ $# -lt 1 || $# -gt 2 || ( $# -eq 2 && "$2" != "--verbs" ) ]]; then
    echo "usage: $0 PREFIX [--verbs]" >&2
    exit 2
fi
prefix=$1
repo=$(cd "$(dirname "$0")/.." && pwd)
cargo=${CARGO:-cargo}
features=()
private="-lpthread -ldl -lm -lrt -lutil -lgcc_s -lc"
if [[ $# -eq 2 ]]; then
    features=(--features verbs)
    private="-libverbs -lrdmacm $private"
fi
(cd "$repo" && "$cargo" build --release -p relink-c "${features[@]}")
target=${CARGO_TARGET_DIR:-$repo/target}
case $target in /*) ;; *) target=$repo/$target ;; esac
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -1)
mkdir -p "$prefix/lib/pkgconfig" "$prefix/include"
prefix=$(cd "$prefix" && pwd)
install -m 0644 "$target/release/librelink.a" "$prefix/lib/"
install -m 0755 "$target/release/librelink.so" "$prefix/lib/"
install -m 0644 "$repo/crates/relink-c/include/relink.h" \
    "$repo/crates/relink-c/include/relink_soft.h" "$prefix/include/"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" -e "s|@PRIVATE@|$private|" \
    "$repo/crates/relink-c/relink.pc.in" > "$prefix/lib/pkgconfig/relink.pc"
echo "installed librelink $version into $prefix"
