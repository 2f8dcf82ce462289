#!/usr/bin/env bash
# The one list of Debian packages relink's checks and tests need, and their
# install. scripts/test.sh (the README's test command), .ci/run and
# tests/vm/setup.sh all take their packages from here.
#
#   scripts/deps.sh GROUP...          install what the groups need
#   scripts/deps.sh --list GROUP...   print their packages, one per line
#
# Groups:
#   tests  the host tiers of scripts/test.sh: the NBD clients and nbdkit of
#          relink-nbd's and relinkd's tests and bench, ip for relinkd's
#          network namespaces, a C compiler and pkg-config for librelink's
#          C programs, libfabric's programs for the libfabric provider
#   lint   .ci/run's clippy and rustdoc of the rdma-core provider
#          (relink-verbs's `rdma` feature: rdma-core headers, libclang)
#   vm     the VM tier's host side (tests/vm/setup.sh): qemu, the initramfs
#          tools, the rdma-core userspace copied into the guest, and what
#          the `rdma` feature builds against
#
# Installs only what is missing (no apt at all when everything is there),
# as root or with passwordless sudo. Where it cannot install (not root, no
# apt, apt failed) it prints what to install and exits 0: the tests that
# need a missing program then report it as a skip. Under CI=true it exits 1
# instead, naming the packages.
set -uo pipefail

# package            groups          what needs it
PACKAGES='
gcc                  tests           relink-c tests: C programs built against librelink (cc)
libc6-dev            tests           relink-c tests: the C library headers
pkg-config           tests,lint,vm   relink-c tests (pkg-config relink); rdma-core discovery
qemu-utils           tests           qemu-img, qemu-io: relink-nbd client tests, relinkd tests and nbd bench
libnbd-bin           tests           nbdinfo, nbdcopy: relink-nbd client tests, relinkd nbdcopy test
nbdkit               tests           nbdkit: relinkd nbd bench baseline (file plugin)
iproute2             tests,vm        ip, tc: relinkd network-namespace tests; the guest network and its netem loss
util-linux           tests           setpriv: relinkd control test (another user as client)
libfabric-bin        tests           fi_info, fi_pingpong: the libfabric provider tests (relink-ofi)
libfabric-dev        tests           rdma/fi_*.h: the libfabric RMA check rma.c (relink-ofi)
openmpi-bin          tests           mpirun: Open MPI over the libfabric provider (relink-ofi)
libopenmpi-dev       tests           mpicc: the checked MPI program of relink-ofi; mpi4py builds against it
python3-venv         tests           scripts/mpi4py.sh: the venv mpi4py is built in
python3-dev          tests           scripts/mpi4py.sh: Python.h for the mpi4py extension
libibverbs-dev       lint,vm         relink-verbs `rdma` feature: verbs headers
librdmacm-dev        lint,vm         relink-verbs `rdma` feature: rdma_cm headers
libclang-dev         lint,vm         relink-verbs-sys: bindgen
clang                lint            relink-verbs-sys: bindgen
qemu-system-x86      vm              the VM (TCG)
busybox-static       vm              the guest userland
cpio                 vm              the initramfs
kmod                 vm              depmod, modprobe in the guest
xz-utils             vm              unpacking the kernel packages
zstd                 vm              unpacking the kernel packages
python3              vm              tests/vm/run.sh: cargo JSON messages
rdma-core            vm              copied into the guest
ibverbs-providers    vm              copied into the guest (rxe)
libibverbs1          vm              copied into the guest
librdmacm1           vm              copied into the guest
ibverbs-utils        vm              ibv_devices in the guest (sanity)
rdmacm-utils         vm              rping in the guest (sanity)
perftest             vm              ib_write_bw, ib_send_bw in the guest (sanity)
'

list() { # list GROUP... -> packages
  local g
  for g in "$@"; do
    case $g in tests|lint|vm) ;; *) echo "deps.sh: unknown group '$g' (tests, lint, vm)" >&2; exit 2 ;; esac
  done
  printf '%s\n' "$PACKAGES" | awk -v want=" $* " 'NF >= 2 {
      n = split($2, gs, ","); for (i = 1; i <= n; i++) if (index(want, " " gs[i] " ")) { print $1; break } }'
}

LIST=0
if [ "${1:-}" = --list ]; then LIST=1; shift; fi
case ${1:-} in
  -h|--help) awk 'NR>1 && /^#/{sub(/^# ?/,"");print;next} NR>1{exit}' "$0"; exit 0 ;;
  "") echo "deps.sh: name a group (tests, lint, vm); see --help" >&2; exit 2 ;;
esac
PKGS=$(list "$@") || exit 2
if [ $LIST = 1 ]; then printf '%s\n' "$PKGS"; exit 0; fi

# skip_ci: the one reading of CI=true, shared with the tests' skips
# shellcheck source=scripts/skip.sh
. "$(dirname "$0")/skip.sh"
cannot() { # cannot WHY: say what to install; a failure under CI
  echo "deps: cannot install ${missing[*]}: $*"
  echo "deps: install them by hand: apt-get install ${missing[*]}"
  echo "deps: until then the tests that need them report SKIPPED (scripts/test.sh counts them)"
  if skip_ci; then echo "FAILED: deps: CI=true and packages are missing: ${missing[*]}"; exit 1; fi
  exit 0
}

missing=()
if ! command -v dpkg-query >/dev/null; then
  read -r -a missing <<< "$(echo $PKGS)"
  cannot "this is not a Debian-like system (no dpkg-query); these are Debian 12's package names"
fi
for p in $PKGS; do
  dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} = 0 ]; then
  echo "deps: the $(echo $PKGS | wc -w) packages of group(s) $* are installed"
  exit 0
fi
SUDO=()
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null && sudo -n true 2>/dev/null || cannot "not root, and no passwordless sudo"
  SUDO=(sudo -n)
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
timeout 600 "${SUDO[@]}" apt-get update -q >/dev/null || cannot "apt-get update failed (no network?)"
timeout 900 "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null ||
  cannot "apt-get install failed"
echo "deps: installed ${missing[*]}"
