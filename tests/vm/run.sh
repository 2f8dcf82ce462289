#!/usr/bin/env bash
# relink's VM test tier: real RDMA (Soft-RoCE, rdma_rxe) in a qemu VM.
#
#   tests/vm/run.sh [--kernels 6.12,6.1] [--groups LIST] [--accel tcg|kvm] [--verbose]
#
# 1. tests/vm/setup.sh: apt packages + the Debian 6.12 and 6.1 kernels (cached)
# 2. builds the test binaries on the host (cargo, release profile):
#      devwatch: `cargo test -p relink-devwatch --no-run` (every test
#                executable) + its `devwatch` example
#      verbs:    relink-verbs's conformance_verbs test with `--features rdma`
#                (skipped LOUDLY when `cargo build -p relink-verbs --features
#                rdma` fails)
#      bench:    relink-bench's rxe bench (`cargo bench -p relink-bench --features
#                rdma --no-run`): relink over rxe next to raw verbs on the same
#                devices (64 B SEND rate, 64 KiB WRITE throughput, ratios)
#      sessions: relink-verbs's sessions_verbs test (relink sessions with
#                traffic across rdma link delete/add, replacement, failover,
#                netdev down/up, 20 cycles, an admin close seen by the peer,
#                planned outages: drains of either side's device before its
#                delete next to an unplanned failover, a suspend across a
#                delete/add), one step per scenario
#      example:  relink-verbs's verbs_write example (`--features rdma`): its
#                server and client roles on rxe1/rxe0, RDMA WRITE checked by
#                the server, messages, an orderly close
#      capi:     librelink with the verbs provider (scripts/install-c.sh
#                --verbs) and examples/c/ping_pong.c built against it with
#                the system C compiler and pkg-config
#      relinkd:  the relinkd binary with `--features rdma` (the rdma-core
#                backend) and the host's qemu-img, for an NBD copy through
#                two daemons on rxe across device delete/add and replacement,
#                and the host's nbdkit with its file plugin (when installed)
#                for the NBD throughput step's baseline
#      ofi:      the libfabric provider with rdma-core (`cargo build -p
#                relink-ofi --features verbs`), tests/ofi/rma.c and
#                tests/mpi/check.c built against the host's libfabric and
#                Open MPI, and the host's fi_pingpong, orterun and Open
#                MPI's and PMIx's plugin directories (build-initramfs -l)
# 3. per kernel: packs an initramfs (tests/vm/build-initramfs.sh) and boots it
#    under qemu; the guest (tests/vm/guest/run.sh) sets up rxe0/rxe1 and runs
#    the groups:
#      6.12  sanity,devwatch,verbs,bench,sessions,example,capi,relinkd,ofi,nvmeof  watcher backend expected: rdma-netlink
#      6.1   sanity,devwatch,verbs,sessions,example,capi,relinkd,nvmeof        watcher backend expected: uevent
# 4. prints one summary table; exit 0 only if every step of every VM passed.
#
# If the tier cannot run here at all (packages cannot be installed, the
# kernel download fails, no qemu) it reports "SKIPPED: VM tier: <why>" and
# exits 0; that is the only way to exit 0 without running. Skips are
# reported as relink-skip reports them (scripts/skip.sh): each is recorded
# in $RELINK_SKIP_LOG when set (scripts/test.sh counts them), a case a
# guest step skipped as expected there too (the reset cases on Soft-RoCE),
# and under CI=true a skip for want of what the install step provides (the
# tier's packages and kernels, the rdma-core headers a group builds
# against, nbdkit) is a failure.
#
# Options / environment:
#   --kernels LIST   RELINK_VM_KERNELS   which kernels (6.12, 6.1; default both)
#   --groups LIST    RELINK_VM_GROUPS    override the groups (sanity,devwatch,verbs,bench,sessions,example,capi,relinkd,ofi,nvmeof)
#   --accel A        RELINK_VM_ACCEL     tcg (default) or kvm (real VMX/SVM only)
#   --verbose        RELINK_VM_VERBOSE=1 stream the whole serial console
#   --netem-loss PCT RELINK_VM_NETEM_LOSS a lossy wire: the bridge drops PCT%
#                    of the first pair's packets each way (tc netem), so rxe
#                    retransmits, NAKs and replays; off by default
#   RELINK_VM_CACHE     download/unpack cache (default target/vm/cache)
#   RELINK_VM_TIMEOUT   host timeout per VM in seconds (default 480)
#   RELINK_VM_TEST_TIMEOUT  per test binary in the guest (default 180)
#   RELINK_VM_MEM       guest memory in MB (default 1024)
#   RELINK_VM_SMP       guest vCPUs (default: the host's, nproc)
#   RELINK_VM_SESSIONS  regex: only the session scenarios it matches
#   RELINK_VM_VERBS     a libtest filter: only the conformance cases it matches
#   RELINK_VM_REPEAT    run each session scenario this many times (default 1;
#                       for hunting a rare failure: run N of one scenario)
#   RELINK_VERBS_*CYCLES  the session scenarios' cycle counts, passed to the
#                       guest (e.g. RELINK_VERBS_RENDEZVOUS_CYCLES=25)
# Logs: target/vm/out/<kernel>/serial.log (full serial console of each VM).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUTDIR=$ROOT/target/vm/out
export RELINK_VM_CACHE=${RELINK_VM_CACHE:-$ROOT/target/vm/cache}
KERNELS=${RELINK_VM_KERNELS:-6.12,6.1}
GROUPS_OVERRIDE=${RELINK_VM_GROUPS:-}
ACCEL=${RELINK_VM_ACCEL:-tcg}
VERBOSE=${RELINK_VM_VERBOSE:-0}
NETEM_LOSS=${RELINK_VM_NETEM_LOSS:-}
HT=${RELINK_VM_TIMEOUT:-480}
# shellcheck source=scripts/skip.sh
. "$ROOT/scripts/skip.sh"
TT=${RELINK_VM_TEST_TIMEOUT:-180}
MEM=${RELINK_VM_MEM:-1024}
CARGO=${CARGO:-cargo}
while [ $# -gt 0 ]; do
  case $1 in
    --kernels) KERNELS=$2; shift 2 ;;
    --kernels=*) KERNELS=${1#*=}; shift ;;
    --groups) GROUPS_OVERRIDE=$2; shift 2 ;;
    --groups=*) GROUPS_OVERRIDE=${1#*=}; shift ;;
    --accel) ACCEL=$2; shift 2 ;;
    --accel=*) ACCEL=${1#*=}; shift ;;
    --verbose|-v) VERBOSE=1; shift ;;
    --netem-loss) NETEM_LOSS=$2; shift 2 ;;
    --netem-loss=*) NETEM_LOSS=${1#*=}; shift ;;
    -h|--help) awk 'NR>1 && /^#/{sub(/^# ?/,"");print;next} NR>1{exit}' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

case $NETEM_LOSS in
  '') ;;
  *[!0-9.]*|.|*.*.*) echo "run.sh: --netem-loss $NETEM_LOSS: a percentage (0-100) is expected" >&2; exit 2 ;;
esac
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.0f", b-a}'; }
banner() { printf '\n--- VM tier: %s\n' "$*"; }
skip_all() { # the tier cannot run on this machine: loud, exit 0 (1 under CI=true)
  printf '\n%s\n' "################################################################"
  skip_report test vm "VM tier" "$*" "the VM tier's packages and kernels (scripts/deps.sh vm, tests/vm/setup.sh)" || exit 1
  echo "         (nothing of the real-RDMA tier ran)"
  printf '%s\n' "################################################################"
  exit 0
}
T0=$(now)

groups_for() { # kernel series -> groups
  if [ -n "$GROUPS_OVERRIDE" ]; then echo "$GROUPS_OVERRIDE"; return; fi
  case $1 in
    6.12) echo sanity,devwatch,verbs,bench,sessions,example,capi,relinkd,ofi,nvmeof ;;
    *) echo sanity,devwatch,verbs,sessions,example,capi,relinkd,nvmeof ;;
  esac
}
expect_for() { case $1 in 6.12) echo rdma-netlink ;; *) echo uevent ;; esac; }
IFS=, read -r -a SERIES <<< "$KERNELS"
ALL_GROUPS=
for s in "${SERIES[@]}"; do
  case $s in 6.1|6.12) ;; *) echo "run.sh: unsupported kernel series '$s' (6.12 or 6.1)" >&2; exit 2 ;; esac
  ALL_GROUPS+=",$(groups_for "$s")"
done
needs() { case "$ALL_GROUPS," in *,$1,*) return 0 ;; esac; return 1; }

# --- 1. setup -------------------------------------------------------------------
banner "setup (apt packages, kernels $KERNELS; cache $RELINK_VM_CACHE)"
"$HERE/setup.sh" --kernels "$KERNELS"; src=$?
case $src in
  0) ;;
  77) skip_all "host setup is not possible here: $(cat "$RELINK_VM_CACHE/setup-unavailable" 2>/dev/null || echo 'see the VM-SETUP-UNAVAILABLE line above')" ;;
  *) echo "FAILED: VM tier: tests/vm/setup.sh exited $src"; exit 1 ;;
esac
command -v qemu-system-x86_64 >/dev/null || skip_all "no qemu-system-x86_64 after setup"
# shellcheck disable=SC1091
. "$RELINK_VM_CACHE/kernels.env"
T_SETUP=$(now)

# --- 2. test binaries ----------------------------------------------------------------
BINS=()            # -x arguments for build-initramfs.sh
TREES=()           # -l arguments
FILES=()           # -f arguments
LIST=$OUTDIR/tests.list
SKIPS=()           # host-side skips: "group|step|why" (the group is not run)
mkdir -p "$OUTDIR"
: > "$LIST"
RESULTS=$OUTDIR/results.txt   # KERNEL|GROUP|STEP|PASS/FAIL/SKIPPED|SECS|NOTE
: > "$RESULTS"
# cargo --message-format=json on stdin -> "kind|name|executable|crate_dir" of each executable
artifacts() {
  python3 -c '
import json, os, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        t = m["target"]
        print("%s|%s|%s|%s" % (t["kind"][0], t["name"], m["executable"], os.path.dirname(m["manifest_path"])))
'
}
add_data() { # the crate's tests/ directory at the same absolute path (golden files etc.)
  [ -d "$1/tests" ] || return 0
  case " ${FILES[*]-} " in *" $1/tests:$1/tests "*) return 0 ;; esac
  FILES+=(-f "$1/tests:$1/tests")
}

if needs devwatch; then
  banner "building relink-devwatch's tests (cargo test -p relink-devwatch --release --no-run)"
  if ! "$CARGO" test -p relink-devwatch --release --no-run --message-format=json-render-diagnostics \
        > "$OUTDIR/devwatch.json"; then
    echo "FAILED: VM tier: building relink-devwatch's tests failed"; exit 1
  fi
  while IFS='|' read -r kind name exe dir; do
    case $kind in
      lib|test) BINS+=(-x "$exe:devwatch-$name"); add_data "$dir"
                echo "devwatch|$name|/vm/bin/devwatch-$name|$dir|--show-output" >> "$LIST" ;;
      example) [ "$name" = devwatch ] && BINS+=(-x "$exe:devwatch-example") ;;
    esac
  done < <(artifacts < "$OUTDIR/devwatch.json")
  grep -c '^devwatch|' "$LIST" | sed 's/^/  devwatch test binaries: /'
fi

if needs verbs || needs sessions; then
  banner "building relink-verbs's conformance suite and session scenarios (--features rdma)"
  if ! "$CARGO" build -p relink-verbs --features rdma --release > "$OUTDIR/verbs-build.log" 2>&1; then
    why=$(grep -m1 -E '^error' "$OUTDIR/verbs-build.log" || tail -1 "$OUTDIR/verbs-build.log")
    tail -30 "$OUTDIR/verbs-build.log" | sed 's/^/  | /'
    SKIPS+=("verbs|conformance_verbs|cargo build -p relink-verbs --features rdma failed: $why")
    SKIPS+=("sessions|sessions_verbs|cargo build -p relink-verbs --features rdma failed: $why")
  elif ! "$CARGO" test -p relink-verbs --features rdma --release --test conformance_verbs --test sessions_verbs \
        --no-run --message-format=json-render-diagnostics > "$OUTDIR/verbs.json" 2> "$OUTDIR/verbs-build.log"; then
    why=$(grep -m1 -E '^error' "$OUTDIR/verbs-build.log" || tail -1 "$OUTDIR/verbs-build.log")
    tail -30 "$OUTDIR/verbs-build.log" | sed 's/^/  | /'
    SKIPS+=("verbs|conformance_verbs|building the verbs tests with --features rdma failed: $why")
    SKIPS+=("sessions|sessions_verbs|building the verbs tests with --features rdma failed: $why")
  else
    while IFS='|' read -r kind name exe dir; do
      [ "$kind" = test ] || continue
      BINS+=(-x "$exe:verbs-$name"); add_data "$dir"
      case $name in
        # one step per scenario (each prints its figures)
        sessions_verbs)
          # netdev_down_up last: if it ever wedged rxe again (see docs/VM-TIER.md),
          # the scenarios before it would still have run
          for sc in $("$exe" --list --format=terse 2>/dev/null | sed -n 's/: test$//p' | grep -E "${RELINK_VM_SESSIONS:-.}" |
                      awk '/netdev/{last=last $0 "\n"; next} {print} END{printf "%s", last}'); do
            for _ in $(seq "${RELINK_VM_REPEAT:-1}"); do
              echo "sessions|$sc|/vm/bin/verbs-$name|$dir|$sc --exact --test-threads=1 --nocapture" >> "$LIST"
            done
          done ;;
        *) echo "verbs|$name|/vm/bin/verbs-$name|$dir|${RELINK_VM_VERBS:-} --test-threads=1 --show-output" >> "$LIST" ;;
      esac
    done < <(artifacts < "$OUTDIR/verbs.json")
  fi
  if [ ${#SKIPS[@]} -gt 0 ]; then
    printf '\n%s\n' "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
    for s in "${SKIPS[@]}"; do echo "SKIPPED: VM tier group ${s%%|*}: ${s##*|}"; done
    echo "         (the group is left out of the VMs; everything else runs)"
    printf '%s\n' "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
  fi
fi
FILES+=(-f "$LIST:/vm/tests.list")
# The scenarios' cycle counts set on the host reach the guest's tests.
ENVFILE=$OUTDIR/guest.env
env | grep -E '^RELINK_VERBS_[A-Z_]*CYCLES=[0-9]+$' | sed 's/^/export /' > "$ENVFILE"
FILES+=(-f "$ENVFILE:/vm/guest.env")
T_BUILD=$(now)

if needs example; then
  banner "building relink-verbs's verbs_write example (--features rdma)"
  if ! "$CARGO" build -p relink-verbs --features rdma --release --example verbs_write \
        --message-format=json-render-diagnostics > "$OUTDIR/example.json" 2> "$OUTDIR/example-build.log"; then
    why=$(grep -m1 -E '^error' "$OUTDIR/example-build.log" || tail -1 "$OUTDIR/example-build.log")
    tail -30 "$OUTDIR/example-build.log" | sed 's/^/  | /'
    SKIPS+=("example|verbs_write|building the verbs_write example with --features rdma failed: $why")
  else
    while IFS='|' read -r kind name exe dir; do
      [ "$kind" = example ] && [ "$name" = verbs_write ] && BINS+=(-x "$exe:verbs-example-write")
    done < <(artifacts < "$OUTDIR/example.json")
  fi
fi

if needs bench; then
  banner "building relink-bench's rxe bench (cargo bench -p relink-bench --features rdma --bench rxe --no-run)"
  if ! "$CARGO" bench -p relink-bench --features rdma --bench rxe --no-run --message-format=json-render-diagnostics \
        > "$OUTDIR/bench.json" 2> "$OUTDIR/bench-build.log"; then
    why=$(grep -m1 -E '^error' "$OUTDIR/bench-build.log" || tail -1 "$OUTDIR/bench-build.log")
    tail -30 "$OUTDIR/bench-build.log" | sed 's/^/  | /'
    SKIPS+=("bench|rxe_relink_vs_raw|building the rxe bench with --features rdma failed: $why")
  else
    while IFS='|' read -r kind name exe dir; do
      [ "$kind" = bench ] && [ "$name" = rxe ] || continue
      BINS+=(-x "$exe:verbs-bench-rxe")
      echo "bench|rxe_relink_vs_raw|/vm/bin/verbs-bench-rxe|$dir|" >> "$LIST"
    done < <(artifacts < "$OUTDIR/bench.json")
  fi
fi

if needs capi; then
  banner "building librelink with the verbs provider and examples/c/ping_pong.c against it"
  CAPI=$OUTDIR/capi
  rm -rf "$CAPI"
  if ! "$ROOT/scripts/install-c.sh" "$CAPI/prefix" --verbs > "$OUTDIR/capi-build.log" 2>&1 ||
     ! cc -std=c11 -Wall -Wextra -Werror -O2 -o "$CAPI/ping_pong" "$ROOT/examples/c/ping_pong.c" \
          $(PKG_CONFIG_PATH=$CAPI/prefix/lib/pkgconfig pkg-config --static --cflags relink) \
          "$CAPI/prefix/lib/librelink.a" \
          $(PKG_CONFIG_PATH=$CAPI/prefix/lib/pkgconfig pkg-config --static --libs-only-l relink | sed 's/-lrelink//') \
          >> "$OUTDIR/capi-build.log" 2>&1; then
    why=$(grep -m1 -E 'error' "$OUTDIR/capi-build.log" || tail -1 "$OUTDIR/capi-build.log")
    tail -30 "$OUTDIR/capi-build.log" | sed 's/^/  | /'
    SKIPS+=("capi|c_ping_pong_rxe|building librelink --verbs or ping_pong.c failed: $why")
  else
    BINS+=(-x "$CAPI/ping_pong:c-ping-pong")
  fi
fi

if needs relinkd; then
  banner "building relinkd with the rdma-core backend (--features rdma) and packing the host's qemu-img"
  if ! "$CARGO" build -p relinkd --features rdma --release --bin relinkd \
        --message-format=json-render-diagnostics > "$OUTDIR/relinkd.json" 2> "$OUTDIR/relinkd-build.log"; then
    why=$(grep -m1 -E '^error' "$OUTDIR/relinkd-build.log" || tail -1 "$OUTDIR/relinkd-build.log")
    tail -30 "$OUTDIR/relinkd-build.log" | sed 's/^/  | /'
    for st in nbd_copy_across_resets nbd_throughput; do
      SKIPS+=("relinkd|$st|building relinkd with --features rdma failed: $why")
    done
  elif ! QEMU_IMG=$(command -v qemu-img); then
    for st in nbd_copy_across_resets nbd_throughput; do
      SKIPS+=("relinkd|$st|no qemu-img on the host (qemu-utils)")
    done
  else
    while IFS='|' read -r kind name exe dir; do
      [ "$kind" = bin ] && [ "$name" = relinkd ] && BINS+=(-x "$exe:relinkd")
    done < <(artifacts < "$OUTDIR/relinkd.json")
    BINS+=(-x "$QEMU_IMG:qemu-img")
    # nbdkit and its file plugin (at the host's path, where nbdkit looks
    # for it): the baseline of relinkd/nbd_throughput
    KIT_PLUGIN=/usr/lib/x86_64-linux-gnu/nbdkit/plugins/nbdkit-file-plugin.so
    if NBDKIT=$(command -v nbdkit) && [ -f "$KIT_PLUGIN" ]; then
      BINS+=(-x "$NBDKIT:nbdkit")
      FILES+=(-f "$KIT_PLUGIN:$KIT_PLUGIN")
    else
      skip_report part vm "relinkd/nbd_throughput: nbdkit baseline" \
          "no nbdkit or $KIT_PLUGIN on the host (apt-get install nbdkit)" "nbdkit (package nbdkit)" ||
        echo "host|relinkd|nbd_throughput_nbdkit_baseline|FAIL||no nbdkit on the host under CI=true" >> "$RESULTS"
    fi
  fi
fi

if needs ofi; then
  banner "building the libfabric provider on rdma-core (relink-ofi --features verbs), tests/ofi/rma.c and tests/mpi/check.c, and packing fi_pingpong and Open MPI"
  OFI=$OUTDIR/ofi
  rm -rf "$OFI"; mkdir -p "$OFI"
  MA=x86_64-linux-gnu
  why=
  if ! "$CARGO" build -p relink-ofi --features verbs --release --message-format=json-render-diagnostics \
        > "$OFI/build.json" 2> "$OFI/build.log"; then
    why="building relink-ofi with --features verbs failed: $(grep -m1 -E '^error' "$OFI/build.log" || tail -1 "$OFI/build.log")"
    tail -30 "$OFI/build.log" | sed 's/^/  | /'
  elif ! SO=$(python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    for f in m.get("filenames") or []:
        if f.endswith("/librelink_fi.so"):
            print(f)
' < "$OFI/build.json" | tail -1) || [ -z "$SO" ]; then
    why="cargo named no librelink_fi.so"
  elif ! cc -std=c11 -O2 -Wall -Wextra -Werror -o "$OFI/rma" "$ROOT/crates/relink-ofi/tests/ofi/rma.c" \
          $(pkg-config --cflags --libs libfabric) >> "$OFI/build.log" 2>&1; then
    why="building rma.c against libfabric-dev failed: $(grep -m1 error "$OFI/build.log")"
  elif ! command -v fi_pingpong >/dev/null; then
    why="no fi_pingpong on the host (libfabric-bin)"
  elif ! command -v mpicc >/dev/null || ! [ -x /usr/bin/orterun ] ||
       ! mpicc -O2 -Wall -Werror -o "$OFI/mpi-check" "$ROOT/crates/relink-ofi/tests/mpi/check.c" >> "$OFI/build.log" 2>&1; then
    why="no Open MPI on the host to pack (openmpi-bin, libopenmpi-dev), or mpicc failed"
  fi
  if [ -n "$why" ]; then
    for st in fi_pingpong_rxe rma_across_delete_add mpi_across_delete_add; do SKIPS+=("ofi|$st|$why"); done
  else
    FILES+=(-f "$SO:/vm/ofi/librelink-fi.so")
    BINS+=(-x "$OFI/rma:ofi-rma" -x "$OFI/mpi-check:ofi-mpi-check" -x "$(command -v fi_pingpong):fi_pingpong")
    # Open MPI as the host has it: orterun (mpirun), its plugins and PMIx's
    TREES+=(-l /usr/bin/orterun -l /usr/bin/orted -l /usr/lib/$MA/openmpi -l /usr/lib/$MA/pmix2
            -l /etc/openmpi -l /usr/share/openmpi)
  fi
fi

# --- 3. one VM per kernel ------------------------------------------------------------------
KARGS=
case $ACCEL in
  # tsc=reliable: no clocksource watchdog. Under TCG a busy guest's TSC
  # looks unstable to it; marking it so flips the sched_clock static key,
  # and the kernel's live text patching (int3 breakpoints) of that key is
  # what TCG has been seen to fault on ("Oops: int3" in sched_clock_cpu,
  # a panic), at boot and under a two-rank MPI job that keeps both vCPUs
  # busy.
  tcg) ACC=(-accel tcg,thread=multi -cpu max); KARGS=" tsc=reliable" ;;
  # real VMX/SVM KVM only; kvm_pvm (nested "PVM") cannot boot the Debian kernel
  kvm) ACC=(-accel kvm -cpu host,-arch-capabilities) ;;
  *) echo "run.sh: --accel tcg|kvm" >&2; exit 2 ;;
esac
FILTER='^(=== STEP .* end |RESULT relinkd_nbd_rxe |=== SUMMARY|RELINK_VM_(BOOTED|EXIT|WATCHDOG)|SKIPPED|.*!!!|.*panicked|Kernel panic|.*(BUG:|Oops))'
VMLINES=()
FAILED=0
for s in "${SERIES[@]}"; do
  var=KDIR_${s//./_}; KDIR=${!var:-}
  [ -n "$KDIR" ] && [ -d "$KDIR" ] || { echo "FAILED: VM tier: no kernel $s after setup"; exit 1; }
  KV=$(ls "$KDIR/lib/modules" | head -1)
  groups=$(groups_for "$s"); expect=$(expect_for "$s")
  # a group whose binaries could not be built is not run (it is in the table as SKIPPED)
  for sk in ${SKIPS[@]+"${SKIPS[@]}"}; do
    g=${sk%%|*}
    case ",$groups," in *,$g,*)
      groups=$(echo ",$groups," | sed "s/,$g,/,/; s/^,//; s/,$//")
      st=${sk#*|}; st=${st%%|*}
      if skip_report test "vm $KV" "$g/$st" "${sk##*|}" \
           "what group $g builds against (scripts/deps.sh vm), or the build itself"; then
        echo "$KV|${sk%|*}|SKIPPED||${sk##*|}" >> "$RESULTS"
      else
        echo "$KV|${sk%|*}|FAIL||${sk##*|}" >> "$RESULTS"
      fi ;;
    esac
  done
  VOUT=$OUTDIR/$KV; mkdir -p "$VOUT"; LOG=$VOUT/serial.log
  banner "kernel $KV: initramfs"
  tb=$(now)
  "$HERE/build-initramfs.sh" -k "$KDIR" -o "$VOUT/initrd.cpio.gz" ${BINS[@]+"${BINS[@]}"} "${FILES[@]}" ${TREES[@]+"${TREES[@]}"} \
    || { echo "FAILED: VM tier: building the initramfs for $KV failed"; exit 1; }
  KERNEL=$KDIR/vmlinux; [ -f "$KERNEL" ] || KERNEL=$(ls "$KDIR"/boot/vmlinuz-*)
  GT=$(( HT > 60 ? HT - 30 : HT ))   # the guest watchdog fires before the host timeout
  APPEND="console=ttyS0 panic=-1 quiet loglevel=4$KARGS relink.groups=${groups:-none} relink.expect=$expect relink.timeout=$GT relink.test_timeout=$TT${NETEM_LOSS:+ relink.netem_loss=$NETEM_LOSS}"
  banner "kernel $KV: booting ($ACCEL, groups ${groups:-none}, expected watcher backend $expect; log $LOG)"
  tv=$(now)
  # A guest kernel that crashes before its init ran (no RELINK_VM_BOOTED
  # line: no step started) is booted once more: under TCG the 6.12 guest
  # has been seen to die of an int3 Oops while patching its own code at
  # boot, an emulation fault that says nothing about relink. The first
  # boot's log is kept next to the second's, and the retry is printed.
  rm -f "$LOG.boot1"
  for boot in 1 2; do
    timeout --kill-after=10 "$HT" qemu-system-x86_64 -nodefaults -no-user-config -display none -no-reboot \
        "${ACC[@]}" -m "$MEM" -smp "${RELINK_VM_SMP:-$(nproc)}" -nic none \
        -kernel "$KERNEL" -initrd "$VOUT/initrd.cpio.gz" -append "$APPEND" \
        -serial stdio < /dev/null 2>&1 | sed -u 's/\r$//' | tee "$LOG" |
      if [ "$VERBOSE" = 1 ]; then cat; else grep -aE --line-buffered "$FILTER"; fi
    qrc=${PIPESTATUS[0]}
    if [ "$boot" = 1 ] && ! grep -aq 'RELINK_VM_BOOTED' "$LOG" && grep -aq 'Kernel panic' "$LOG"; then
      mv "$LOG" "$LOG.boot1"
      echo "!!! kernel $KV: the guest kernel panicked before its init ran (no step started; log $LOG.boot1): booting it again"
      grep -a -m3 -E 'Oops|BUG:|Kernel panic' "$LOG.boot1" | sed 's/^/  | /'
      continue
    fi
    break
  done
  te=$(now)
  rc=$(grep -a -o 'RELINK_VM_EXIT=[0-9]*' "$LOG" | tail -1 | cut -d= -f2)
  grep -a '^RELINK_VM_RESULT|' "$LOG" | cut -d'|' -f2- >> "$RESULTS"
  # the cases a step skipped as expected on this kernel (an unexpected one
  # failed its step): RELINK_VM_SKIP|group|step|<case>: <why>
  while IFS='|' read -r _ g st line; do
    skip_report part "vm $KV" "$g/$st: ${line%%: *}" "${line#*: }" || FAILED=1
  done < <(grep -a '^RELINK_VM_SKIP|' "$LOG" | tr -d '\r')
  if [ -z "$rc" ]; then
    echo "!!! kernel $KV: no RELINK_VM_EXIT marker (qemu rc=$qrc: crash, panic or host timeout ${HT}s); last lines:"
    tail -40 "$LOG" | sed 's/^/  | /'
    echo "$KV|vm|boot_and_exit|FAIL||no RELINK_VM_EXIT marker, qemu rc=$qrc" >> "$RESULTS"
    FAILED=1
  elif [ "$rc" != 0 ]; then
    FAILED=1
    # the output of each failed step, from the serial log
    for st in $(grep -a '^RELINK_VM_RESULT|' "$LOG" | awk -F'|' '$5=="FAIL"{print $3"/"$4}'); do
      out=$(awk -v s="$st" 'index($0, "=== STEP "s" begin ")==1 {p=1} p{print} p && index($0, "=== STEP "s" end ")==1 {exit}' "$LOG" | tr -d '\r')
      # why it failed first (a panic's message: the problems it lists), so
      # that a report cut to its first lines still says it
      echo; echo "!!! kernel $KV: failed step $st: why"
      grep -a -A30 'panicked at' <<< "$out" | grep -a -v -E '^ *(\| *)?\[ *[0-9.]+s\]' | head -40 | sed 's/^/  | /'
      echo; echo "!!! kernel $KV: output of failed step $st (last 150 lines):"
      tail -150 <<< "$out" | sed 's/^/  | /'
    done
    [ "$rc" = 124 ] && echo "!!! kernel $KV: the guest watchdog fired"
  fi
  VMLINES+=("$(printf '%-24s %-22s exit=%-4s initramfs %3ss  vm %4ss' "$KV" "${groups:-none}" "${rc:-none}" "$(secs "$tb" "$tv")" "$(secs "$tv" "$te")")")
done
T_END=$(now)

# --- 4. summary ------------------------------------------------------------------------------
echo
echo "==================== VM tier summary ===================="
printf '%-24s %-9s %-42s %-7s %8s  %s\n' KERNEL GROUP STEP RESULT DUR NOTE
while IFS='|' read -r kv g st r d n; do
  printf '%-24s %-9s %-42s %-7s %8s  %s\n' "$kv" "$g" "$st" "$r" "${d:+${d}s}" "$n"
done < "$RESULTS"
echo
for l in "${VMLINES[@]}"; do echo "VM: $l"; done
echo "time: setup $(secs "$T0" "$T_SETUP")s, build $(secs "$T_SETUP" "$T_BUILD")s, VMs $(secs "$T_BUILD" "$T_END")s, total $(secs "$T0" "$T_END")s"
echo "logs: $OUTDIR/<kernel>/serial.log"
nfail=$(awk -F'|' '$4=="FAIL"' "$RESULTS" | wc -l)
npass=$(awk -F'|' '$4=="PASS"' "$RESULTS" | wc -l)
nskip=$(awk -F'|' '$4=="SKIPPED"' "$RESULTS" | wc -l)
if [ "$FAILED" != 0 ] || [ "$nfail" != 0 ] || [ "$npass" = 0 ]; then
  echo "FAILED: VM tier: $nfail step(s) failed, $npass passed, $nskip skipped"
  exit 1
fi
[ "$nskip" != 0 ] && echo "SKIPPED: VM tier: $nskip step(s) could not run (see the table above)"
echo "PASSED: VM tier: $npass step(s) passed on ${#SERIES[@]} kernel(s)"
exit 0
