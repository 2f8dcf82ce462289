#!/usr/bin/env bash
# Builds the initramfs of the relink VM tier.
#
#   tests/vm/build-initramfs.sh -k KDIR [-o OUT.cpio.gz] [-x HOST_BINARY[:NAME]]... [-f HOST_PATH:GUEST_PATH]...
#
#   -k KDIR   an unpacked Debian linux-image package (tests/vm/setup.sh)
#   -o OUT    output (default <repo>/target/vm/out/<kernel>/initrd.cpio.gz)
#   -x BIN[:NAME]  a host binary (e.g. a cargo test executable), packed as
#             /vm/bin/NAME (default: its basename) with every shared library
#             ldd names; debug info is stripped (symbols stay, for backtraces)
#   -f S:D    a host file or directory S copied to D in the guest (test data)
#   -l PATH   a host program, library or directory (e.g. Open MPI's plugin
#             directories) at the same path in the guest, symbolic links
#             kept, with every shared library its ELF files need (ldd)
#
# Contents: static busybox as the base userland; /init (guest/init) and
# /vm/run.sh (guest/run.sh); the host's own rdma-core userspace (rdma, ip,
# ibv_devices, ibv_devinfo, rping, perftest's ib_write_bw/ib_read_bw/ib_send_bw, tc, ...)
# with the rxe provider and every library they need, byte-identical to the
# host's (Debian 12: rdma-core 44, glibc 2.36), so host-built binaries run
# unchanged in the guest; the kernel modules rdma_rxe, rdma_ucm, ib_umad,
# veth, bridge, dummy, sch_netem, crc32 (+ dependencies), decompressed (6.12 ships
# .ko.xz), with /etc/relink-vm/modules.list = the insmod order computed here.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
KDIR= OUT= EXTRA_BINS=() EXTRA_FILES=() EXTRA_TREES=()
while getopts "k:o:x:f:l:" opt; do
  case $opt in
    k) KDIR=$OPTARG ;;
    o) OUT=$OPTARG ;;
    x) EXTRA_BINS+=("$OPTARG") ;;
    f) EXTRA_FILES+=("$OPTARG") ;;
    l) EXTRA_TREES+=("$OPTARG") ;;
    *) awk 'NR>1 && /^#/{sub(/^# ?/,"");print;next} NR>1{exit}' "$0" >&2; exit 2 ;;
  esac
done
[ -n "$KDIR" ] && [ -d "$KDIR/lib/modules" ] || { echo "build-initramfs: -k KDIR (an unpacked kernel from tests/vm/setup.sh) is required" >&2; exit 2; }
KV=$(ls "$KDIR/lib/modules" | head -1)
OUT=${OUT:-$ROOT/target/vm/out/$KV/initrd.cpio.gz}
mkdir -p "$(dirname "$OUT")"
STAGE=$(mktemp -d "$(dirname "$OUT")/stage.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT

# merged-/usr layout like Debian 12
mkdir -p "$STAGE"/{usr/bin,usr/sbin,usr/lib/x86_64-linux-gnu,usr/lib64,etc/relink-vm,etc/libibverbs.d,proc,sys,dev,tmp,run,mnt,vm/bin}
ln -s usr/bin "$STAGE/bin"; ln -s usr/sbin "$STAGE/sbin"; ln -s usr/lib "$STAGE/lib"; ln -s usr/lib64 "$STAGE/lib64"

guest_path() { # host absolute path -> path inside the stage (merged /usr)
  local p=${1#/}
  case $p in bin/*|sbin/*|lib/*|lib64/*) p=usr/$p ;; esac
  echo "$STAGE/$p"
}
copy_file() { # copy (dereferencing symlinks) to the same path in the guest, or to $2
  local dst; dst=$(guest_path "${2:-$1}")
  mkdir -p "$(dirname "$dst")"
  [ -e "$dst" ] || cp -L "$1" "$dst"
}
copy_deps() { # every shared library a binary needs, at its host path
  local lib
  ldd "$1" 2>/dev/null | awk '/=> \//{print $3} /^\t\//{print $1}' | while read -r lib; do
    copy_file "$lib"
  done
}
copy_with_deps() { copy_file "$1" "${2:-$1}"; copy_deps "$1"; }

# --- busybox base ------------------------------------------------------------------
BUSYBOX=/bin/busybox   # busybox-static's
[ -x "$BUSYBOX" ] || { echo "build-initramfs: no static busybox (apt-get install busybox-static)" >&2; exit 1; }
cp -L "$BUSYBOX" "$STAGE/usr/bin/busybox"
for a in $("$BUSYBOX" --list); do
  [ -e "$STAGE/usr/bin/$a" ] || ln -s busybox "$STAGE/usr/bin/$a"
done
ln -sf ../bin/busybox "$STAGE/usr/sbin/modprobe"   # the kernel's request_module() helper

# --- rdma-core userspace + iproute2 (replaces busybox's ip) --------------------------
TOOLS="/usr/bin/ip /usr/bin/rdma /usr/bin/ibv_devices /usr/bin/ibv_devinfo /usr/bin/ibv_rc_pingpong
 /usr/bin/rping /usr/bin/udaddy /usr/bin/ib_send_bw /usr/bin/ib_write_bw /usr/bin/ib_read_bw /usr/bin/ib_write_lat
 /usr/bin/ib_send_lat /usr/bin/tc"
for t in $TOOLS; do
  h=$t; [ -e "$h" ] || h=$(command -v "$(basename "$t")" || true)
  [ -n "$h" ] && [ -e "$h" ] || { echo "build-initramfs: missing $t (run tests/vm/setup.sh)" >&2; exit 1; }
  rm -f "$(guest_path "$t")"; copy_with_deps "$h" "$t"
done
MA=x86_64-linux-gnu
RXE=$(ls /usr/lib/$MA/libibverbs/librxe-rdmav*.so 2>/dev/null | head -1)
[ -n "$RXE" ] || { echo "build-initramfs: no rxe provider (apt-get install ibverbs-providers)" >&2; exit 1; }
copy_with_deps "$RXE"
cp /etc/libibverbs.d/rxe.driver "$STAGE/etc/libibverbs.d/"
copy_file /lib64/ld-linux-x86-64.so.2
# dlopen()ed at run time, invisible to ldd: glibc needs libgcc_s for
# pthread_exit()/pthread_cancel() unwinding (rping aborts without it)
copy_file "/lib/$MA/libgcc_s.so.1"

# --- guest scripts, test binaries, test data ------------------------------------------
install -m 0755 "$HERE/guest/init" "$STAGE/init"
install -m 0755 "$HERE/guest/run.sh" "$STAGE/vm/run.sh"
install -m 0644 "$HERE/guest/nvmeof.sh" "$STAGE/vm/nvmeof.sh"
for x in ${EXTRA_BINS[@]+"${EXTRA_BINS[@]}"}; do
  b=${x%%:*}; name=$(basename "$b"); [ "$b" = "$x" ] || name=${x#*:}
  [ -x "$b" ] || { echo "build-initramfs: -x $b: not an executable" >&2; exit 1; }
  dst=$STAGE/vm/bin/$name
  strip --strip-debug -o "$dst" "$b" 2>/dev/null || cp -L "$b" "$dst"
  chmod 0755 "$dst"
  copy_deps "$b"
done
for f in ${EXTRA_FILES[@]+"${EXTRA_FILES[@]}"}; do
  src=${f%%:*}; dst=${f#*:}
  mkdir -p "$STAGE/$(dirname "$dst")"; cp -a "$src" "$STAGE/$dst"
done
for t in ${EXTRA_TREES[@]+"${EXTRA_TREES[@]}"}; do
  [ -e "$t" ] || { echo "build-initramfs: -l $t: no such file" >&2; exit 1; }
  dst=$(guest_path "$t"); mkdir -p "$(dirname "$dst")"
  if [ -d "$t" ]; then mkdir -p "$dst"; cp -a "$t/." "$dst/"; else [ -e "$dst" ] || cp -a "$t" "$dst"; fi
  find "$t" -type f -print0 | while IFS= read -r -d '' f; do
    if head -c4 "$f" | grep -q 'ELF'; then copy_deps "$f"; fi
  done
done
printf 'root:x:0:0:root:/:/bin/sh\n' > "$STAGE/etc/passwd"
printf 'root:x:0:\n' > "$STAGE/etc/group"
printf '127.0.0.1 localhost\n' > "$STAGE/etc/hosts"

# --- kernel modules ---------------------------------------------------------------------
# crc32*: rxe's ICRC asks the crypto API for "crc32" (a request_module, not a
# module dependency); optional where the kernel has them built in.
ROOT_MODS="crc32_generic crc32-pclmul rdma_rxe rdma_ucm ib_umad veth dummy bridge sch_netem nvme-rdma nvmet-rdma"
: > "$STAGE/etc/relink-vm/modules.list"
for m in $ROOT_MODS; do
  if ! deps=$(modprobe -d "$KDIR" -S "$KV" --show-depends "$m" 2>&1); then
    case $m in crc32*) echo "build-initramfs: note: no module $m in $KV"; continue ;; esac
    echo "build-initramfs: module $m missing in $KV: $deps" >&2; exit 1
  fi
  echo "$deps" | awk '$1=="insmod"{print $2}' | while read -r ko; do
    rel=${ko#"$KDIR"/}
    case $rel in *.ko.xz) plain=${rel%.xz} ;; *.ko.zst) plain=${rel%.zst} ;; *.ko.gz) plain=${rel%.gz} ;; *) plain=$rel ;; esac
    grep -qx "/$plain" "$STAGE/etc/relink-vm/modules.list" && continue
    mkdir -p "$STAGE/$(dirname "$plain")"
    case $rel in
      *.ko.xz) xz -dc "$ko" > "$STAGE/$plain" ;;
      *.ko.zst) zstd -dcq "$ko" > "$STAGE/$plain" ;;
      *.ko.gz) gzip -dc "$ko" > "$STAGE/$plain" ;;
      *) cp "$ko" "$STAGE/$plain" ;;
    esac
    echo "/$plain" >> "$STAGE/etc/relink-vm/modules.list"
  done
done
cp "$KDIR/lib/modules/$KV"/modules.builtin* "$STAGE/lib/modules/$KV/" 2>/dev/null || true
cp "$KDIR/lib/modules/$KV"/modules.order "$STAGE/lib/modules/$KV/" 2>/dev/null || true
depmod -b "$STAGE" "$KV"

# --- pack ---------------------------------------------------------------------------------
( cd "$STAGE" && find . -print0 | cpio --null -o -H newc --quiet ) | gzip -1 > "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "initramfs: $OUT ($(du -h "$OUT" | cut -f1), $(wc -l < "$STAGE/etc/relink-vm/modules.list") modules, $(ls "$STAGE/vm/bin" | wc -l) test binaries, uncompressed $(du -sh "$STAGE" | cut -f1))"
