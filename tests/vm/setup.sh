#!/usr/bin/env bash
# relink VM tier, host setup (idempotent, cached).
#
#   tests/vm/setup.sh [--kernels 6.12,6.1]
#
# * apt packages: the `vm` group of scripts/deps.sh (qemu (TCG),
#   busybox-static, cpio, kmod, the rdma-core userspace that is copied into
#   the guest, and the rdma-core development files + libclang that
#   relink-verbs's `rdma` feature builds against). Installs only what is
#   missing (no apt at all when everything is there, so a warm machine
#   needs no network).
# * Debian kernel packages with CONFIG_RDMA_RXE=m (the generic amd64
#   flavour; the -cloud flavour has no rdma_rxe): 6.1 (what
#   linux-image-amd64 depends on) and 6.12 (the newest
#   linux-image-6.12.*+deb12-amd64 apt offers; it has the RDMA netlink
#   monitor). They are only DOWNLOADED (apt-get download) and unpacked under
#   the cache dir, never installed into /boot or /lib/modules.
# * an uncompressed vmlinux is extracted from each vmlinuz: qemu boots it
#   through the PVH entry point, which skips the real-mode setup and the xz
#   decompression (a few seconds under TCG).
#
# Cache: $RELINK_VM_CACHE (default: <repo>/target/vm/cache). Result:
# $CACHE/kernels.env with KDIR_6_1=... and KDIR_6_12=...
#
# Exit codes: 0 ready; 77 cannot be set up HERE (no root for apt, apt or the
# download failed, no network): run.sh turns that into a loud SKIPPED;
# anything else is a real failure.
#
# Note (from the verified rig this is derived from): on images that carry
# qemu-utils 10.x from bookworm-backports, installing qemu-system-x86 7.2
# makes apt REMOVE that qemu-utils (it conflicts with qemu-system-common
# 7.2), and apt will not downgrade it by itself: when qemu is installed and
# qemu-utils is present, qemu-utils is named at the version of the
# qemu-system-common apt picks (--allow-downgrades), so 7.2's qemu-img takes
# its place. The tier itself does not need qemu-img.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${RELINK_VM_CACHE:-$ROOT/target/vm/cache}
KERNELS=6.12,6.1
while [ $# -gt 0 ]; do
  case $1 in
    --kernels) KERNELS=$2; shift 2 ;;
    --kernels=*) KERNELS=${1#*=}; shift ;;
    -h|--help) awk 'NR>1 && /^#/{sub(/^# ?/,"");print;next} NR>1{exit}' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
export DEBIAN_FRONTEND=noninteractive
unavailable() { # the reason also goes to $CACHE/setup-unavailable for run.sh
  echo "VM-SETUP-UNAVAILABLE: $*" >&2
  echo "$*" > "$CACHE/setup-unavailable" 2>/dev/null || true
  exit 77
}
t0=$(date +%s)
mkdir -p "$CACHE"
rm -f "$CACHE/setup-unavailable"

# --- apt packages -------------------------------------------------------------
# the `vm` group of the project's one package list
PKGS=$("$ROOT/scripts/deps.sh" --list vm) || { echo "setup: scripts/deps.sh --list vm failed" >&2; exit 1; }
missing=()
for p in $PKGS; do
  dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed' || missing+=("$p")
done
SUDO=()
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO=(sudo -n); fi
fi
APT_UPDATED=0
apt_update() {
  [ $APT_UPDATED = 1 ] && return 0
  timeout 300 "${SUDO[@]}" apt-get update -q >/dev/null 2>&1 || return 1
  APT_UPDATED=1
}
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  if [ "$(id -u)" != 0 ] && [ ${#SUDO[@]} = 0 ]; then
    unavailable "packages missing (${missing[*]}) and not root (no passwordless sudo) to apt-get install them"
  fi
  apt_update || unavailable "apt-get update failed (no network?)"
  extra=()
  if [[ " ${missing[*]} " == *" qemu-system-x86 "* ]] && dpkg-query -W qemu-utils >/dev/null 2>&1; then
    # the preinstalled qemu-utils (10.x, backports) Breaks the qemu-system-common
    # apt installs (7.2), and apt does not downgrade on its own: ask for the
    # qemu-utils of the same version as that qemu-system-common
    qv=$(apt-cache policy qemu-system-common 2>/dev/null | awk '/Candidate:/{print $2; exit}')
    if [ -n "$qv" ] && [ "$qv" != "(none)" ]; then extra=("qemu-utils=$qv"); else extra=(qemu-utils); fi
  fi
  timeout 900 "${SUDO[@]}" apt-get install -y -q --no-install-recommends --allow-downgrades "${missing[@]}" "${extra[@]}" \
    || unavailable "apt-get install ${missing[*]} failed"
else
  echo "setup: all apt packages present"
fi
command -v qemu-system-x86_64 >/dev/null || unavailable "qemu-system-x86_64 not found after installing qemu-system-x86"

# --- kernels -------------------------------------------------------------------
# newest package apt offers for a series; empty if apt knows none
pick_kpkg() {
  case $1 in
    6.1) apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-6\.1\.[0-9]/{print $2; exit}' ;;
    6.12) apt-cache pkgnames linux-image-6.12. 2>/dev/null | grep -E '^linux-image-6\.12\.[0-9]+\+deb12-amd64$' | sort -V | tail -1 ;;
    *) echo "setup: unsupported kernel series $1 (6.1 or 6.12)" >&2; return 2 ;;
  esac
}
# newest already-prepared kernel of a series in the cache; empty if none
cached_kdir() {
  local pat
  case $1 in 6.1) pat='linux-image-6.1.*-amd64' ;; 6.12) pat='linux-image-6.12.*+deb12-amd64' ;; esac
  for d in $(cd "$CACHE/kernels" 2>/dev/null && ls -d $pat 2>/dev/null | sort -V -r); do
    [ -f "$CACHE/kernels/$d/.relink-ready" ] && { echo "$CACHE/kernels/$d"; return; }
  done
}
extract_vmlinux() { # vmlinuz -> vmlinux: the first xz/zstd stream that unpacks to an ELF (like the kernel's scripts/extract-vmlinux)
  local img=$1 out=$2 magic tool off
  for mt in 'fd377a585a00:xz -dc --single-stream' '28b52ffd:zstd -dcq'; do
    magic=${mt%%:*}; tool=${mt#*:}
    for off in $(LC_ALL=C grep -obUaP "$(echo "$magic" | sed 's/../\\x&/g')" "$img" | cut -d: -f1); do
      tail -c +$((off + 1)) "$img" | $tool > "$out.tmp" 2>/dev/null || true
      if [ "$(head -c 4 "$out.tmp" | od -An -tx1 | tr -d ' ')" = 7f454c46 ]; then mv "$out.tmp" "$out"; return 0; fi
    done
  done
  rm -f "$out.tmp"; return 1
}
prepare_kernel() { # series -> sets KDIR
  local series=$1 kpkg kver kdir deb
  kpkg=${KPKG_OVERRIDE:-}
  if [ -z "$kpkg" ]; then
    kpkg=$(pick_kpkg "$series")
    if [ -z "$kpkg" ] && apt_update; then kpkg=$(pick_kpkg "$series"); fi
  fi
  if [ -z "$kpkg" ]; then
    KDIR=$(cached_kdir "$series")
    [ -n "$KDIR" ] && { echo "setup: apt offers no $series kernel; using cached $KDIR"; return 0; }
    unavailable "apt knows no linux-image $series package (apt-get update failed or not a Debian 12 host)"
  fi
  kver=${kpkg#linux-image-}
  kdir=$CACHE/kernels/linux-image-$kver
  if [ ! -f "$kdir/.relink-ready" ]; then
    echo "setup: preparing $kpkg"
    mkdir -p "$CACHE/debs"
    deb=$(ls "$CACHE/debs/${kpkg}"_*.deb 2>/dev/null | head -1 || true)
    if [ -z "$deb" ]; then
      if ! ( cd "$CACHE/debs" && timeout 600 apt-get download -q "$kpkg" ); then
        # the index may be stale (the version was superseded): refresh once
        if apt_update && ( cd "$CACHE/debs" && timeout 600 apt-get download -q "$kpkg" ); then :; else
          KDIR=$(cached_kdir "$series")
          [ -n "$KDIR" ] && { echo "setup: WARNING: download of $kpkg failed; using cached $KDIR"; return 0; }
          unavailable "apt-get download $kpkg failed (no network?)"
        fi
      fi
      deb=$(ls "$CACHE/debs/${kpkg}"_*.deb | head -1)
    fi
    rm -rf "$kdir"
    mkdir -p "$CACHE/kernels"
    dpkg-deb -x "$deb" "$kdir.tmp"
    mv "$kdir.tmp" "$kdir"
    grep -q '^CONFIG_RDMA_RXE=m' "$kdir/boot/config-$kver" || { echo "setup: kernel $kver has no rdma_rxe module" >&2; exit 1; }
    depmod -b "$kdir" "$kver"
    extract_vmlinux "$kdir/boot/vmlinuz-$kver" "$kdir/vmlinux" \
      || echo "setup: WARNING: no vmlinux extracted from vmlinuz-$kver; the VM boots the bzImage (slower)"
    touch "$kdir/.relink-ready"
    rm -f "$deb"   # the unpacked tree is the cache
  fi
  KDIR=$kdir
}
: > "$CACHE/kernels.env.tmp"
IFS=, read -r -a series_list <<< "$KERNELS"
for s in "${series_list[@]}"; do
  prepare_kernel "$s"
  echo "KDIR_${s//./_}=$KDIR" >> "$CACHE/kernels.env.tmp"
  echo "setup: kernel $s: $KDIR"
done
# keep entries of series not prepared this time
if [ -f "$CACHE/kernels.env" ]; then
  grep -v -F -f <(cut -d= -f1 "$CACHE/kernels.env.tmp" | sed 's/$/=/') "$CACHE/kernels.env" >> "$CACHE/kernels.env.tmp" || true
fi
mv "$CACHE/kernels.env.tmp" "$CACHE/kernels.env"
echo "setup: done in $(( $(date +%s) - t0 ))s (cache $CACHE)"
