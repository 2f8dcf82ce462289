#!/bin/sh
# The relink VM tier inside the guest (run by /init as PID 1's child).
#
#   run.sh [groups]     comma list; always first: setup (modules, network,
#                       rxe0/rxe1, policy routing), then any of
#     sanity    rxe works: ibv_devices/ibv_devinfo, rping and ib_write_bw
#               between rxe0 (10.10.0.1 on veth0) and rxe1 (10.10.0.2 on veth1)
#     devwatch  relink-devwatch's test binaries with
#               RELINK_DEVWATCH_EXPECT_BACKEND=$VM_EXPECT, and the devwatch
#               example watching a real `rdma link delete`/`add` of rxe1
#     verbs     relink-verbs's conformance suite on the real rxe devices
#     bench     relink-bench's rxe bench: relink next to raw verbs on rxe0/rxe1
#     capi      the C example (examples/c/ping_pong.c on librelink) between
#               rxe0 and rxe1 while rxe1 is deleted and added again
#     sessions  relink sessions with traffic across rdma link delete/add,
#               a replacement device (rxe2 on the spare veth2), failover to a
#               second pair (rxe3/rxe4 on 10.10.1.0/24), netdev down/up,
#               20 unplug/replug cycles, an admin close on either side
#               (the peer must close at once, not recover), and planned
#               outages: a drain of either side's device before its delete
#               (next to an unplanned failover), a suspend across a
#               delete/add; and unplanned failovers without and with a hot
#               standby (Policy::standby), one run
#     example   relink-verbs's verbs_write example as two processes: the
#               server on rxe1 (10.10.0.2), the client on rxe0 (10.10.0.1);
#               both must exit 0
#     relinkd   two relinkd daemons on rdma-core (the target on rxe1, the
#               initiator on rxe0); qemu-img writes an image through the
#               initiator's NBD socket across rdma link delete/add of either
#               side and a replacement device (rxe2 on veth1); read back;
#               then NBD throughput through a fresh pair next to
#               `nbdkit file` and the local file (qemu-img bench)
#     ofi       the libfabric provider on rdma-core: fi_pingpong over relink
#               (msg, and rdm through ofi_rxm), the project's RMA check
#               (fi_writedata; tests/ofi/rma.c) and Open MPI with 2 ranks
#               (tests/mpi/check.c) across rdma link delete/add of rxe1
#               and of rxe0, each process on its own device
#     nvmeof    the anchor: the kernel's NVMe-oF (nvmet rdma port, nvme-rdma
#               host) on rxe0/rxe1 under the same rdma link delete/add of
#               either side during a direct write, and its throughput
#               (nvmeof.sh; the steps record what the kernel did)
#
# Test binaries come from /vm/tests.list, one per line:
#   group|name|/vm/bin/<binary>|<working dir>|<args>
# Every step prints "=== STEP <group>/<name> begin" and
# "=== STEP <group>/<name> end PASS|FAIL ..." lines, then its output; at the
# end a summary table and one "RELINK_VM_RESULT|..." line per step for the
# host. Exit status = number of failed steps.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:/vm/bin
# Destroys on a lost device succeed (libibverbs reads this once, at its first
# device scan). The test binaries are multi-threaded (libtest), so
# relink_verbs::init_environment cannot set it soundly for them: an operator
# exports it, and so does the tier.
export RDMAV_ALLOW_DISASSOC_DESTROY=1
# The host's RELINK_VERBS_*CYCLES (tests/vm/run.sh writes them).
[ -f /vm/guest.env ] && . /vm/guest.env
GROUPS_=${1:-sanity}
EXPECT=${VM_EXPECT:-}
TEST_TIMEOUT=${VM_TEST_TIMEOUT:-240}
KV=$(uname -r)
# Debian's static busybox runs its own applets in preference to PATH
# lookups (FEATURE_SH_STANDALONE): call iproute2's ip and tc explicitly.
ip() { /usr/bin/ip "$@"; }
tc() { /usr/bin/tc "$@"; }
want() { case ",$GROUPS_," in *,all,*|*,$1,*) return 0 ;; esac; return 1; }
ts() { cut -d' ' -f1 /proc/uptime; }
dt() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", b-a}'; }

FAILS=0
: > /tmp/results
step() { GROUP=$1; STEP=$2; NOTE=; STEP_T0=$(ts); echo; echo "=== STEP $GROUP/$STEP begin t=$STEP_T0"; }
endstep() { # endstep <rc>   (uses $NOTE)
  t=$(ts); res=PASS; [ "$1" -ne 0 ] && { res=FAIL; FAILS=$((FAILS+1)); }
  d=$(dt "$STEP_T0" "$t")
  echo "=== STEP $GROUP/$STEP end $res rc=$1 t=$t dur=${d}s${NOTE:+ ($NOTE)}"
  echo "$GROUP|$STEP|$res|$d|$NOTE" >> /tmp/results
}
x() { echo "+ $*"; "$@"; }
tx() { t_=$(ts); "$@"; r_=$?; echo "  [timing] '$*' rc=$r_ took $(dt "$t_" "$(ts)")s"; return $r_; }
alive() { [ -r "/proc/$1/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }
gone() { ! alive "$1"; }
wait_for() { # wait_for <timeout_s> <command...>: until the command succeeds
  w_end=$(awk -v n="$(ts)" -v t="$1" 'BEGIN{print n+t}'); shift
  while ! "$@"; do
    awk -v n="$(ts)" -v e="$w_end" 'BEGIN{exit !(n > e)}' && return 1
    sleep 0.05
  done
}
gid_idx() { # gid_idx dev ipv4 -> index of the RoCE v2 GID of that IPv4 address
  hex=$(echo "$2" | awk -F. '{printf "%02x%02x:%02x%02x", $1,$2,$3,$4}')
  for i in 0 1 2 3 4 5 6 7; do
    g=/sys/class/infiniband/$1/ports/1/gids/$i
    if [ "$(cat $g 2>/dev/null)" = "0000:0000:0000:0000:0000:ffff:$hex" ] &&
       [ "$(cat /sys/class/infiniband/$1/ports/1/gid_attrs/types/$i 2>/dev/null)" = "RoCE v2" ]; then echo "$i"; return 0; fi
  done
  return 1
}
cnt() { # cnt dev -> "sent/rcvd" packets of an rxe device
  c=/sys/class/infiniband/$1/ports/1/hw_counters
  echo "$(cat $c/sent_pkts 2>/dev/null || echo ?)/$(cat $c/rcvd_pkts 2>/dev/null || echo ?)"
}
wait_listen() { # wait_listen ip port: until an rdma_cm listener exists (max 10 s)
  wait_for 10 sh -c "rdma res show cm_id 2>/dev/null | grep -q 'LISTEN.*$1:$2'" && return 0
  echo "  (listener $1:$2 not visible in 'rdma res show cm_id' after 10s)"; rdma res show cm_id; return 1
}
policy_routes() { # force 10.10.0.1 <-> 10.10.0.2 onto the wire: $1 holds .1, $2 holds .2
  ip route replace 10.10.0.2 dev "$1" src 10.10.0.1 table 102
  ip route replace 10.10.0.1 dev "$2" src 10.10.0.2 table 101
  ip neigh flush all
}

echo "=== ENV kernel=$KV cpus=$(nproc) mem=$(awk '/MemTotal/{print $2"kB"}' /proc/meminfo) groups=$GROUPS_ expect_backend=${EXPECT:-none}"
echo "=== ENV glibc: $(/lib64/ld-linux-x86-64.so.2 --version 2>&1 | head -1)"
echo "=== ENV rdma: $(rdma -V 2>&1)"
echo 20 > /proc/sys/kernel/hung_task_timeout_secs 2>/dev/null   # surface a hung `rdma link delete` quickly

############################################################################
# setup (always): modules, veth pairs + bridge, rxe0/rxe1, policy routing
step setup modules
rc=0
while read -r ko; do
  m_=${ko##*/}; m_=${m_%.ko}
  [ -d /sys/module/$(echo "$m_" | tr - _) ] && continue
  if ! insmod "$ko" 2>/tmp/insmod.err; then
    echo "  insmod ${ko##*/} FAILED: $(cat /tmp/insmod.err)"
    case $ko in *crc32*) ;; *) rc=1 ;; esac
  fi
done < /etc/relink-vm/modules.list
echo "  loaded: $(cut -d' ' -f1 /proc/modules | tr '\n' ' ')"
ls /dev/infiniband/ 2>&1 | sed 's/^/  \/dev\/infiniband: /'
endstep $rc

step setup network      # veth0 <-> veth0p, veth1 <-> veth1p, both peers on br0
rc=0
echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6
echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6
ip link set lo up || rc=1
ip link add br0 type bridge && ip link set br0 up || rc=1
for v in veth0 veth1; do
  ip link add $v type veth peer name ${v}p && ip link set ${v}p master br0 && ip link set ${v}p up && ip link set $v up || rc=1
done
ip addr add 10.10.0.1/24 dev veth0 || rc=1
ip addr add 10.10.0.2/24 dev veth1 || rc=1
# a spare netdev on the bridge, without address or rxe device: a test can
# move 10.10.0.1 onto it and add a replacement device (new MAC -> new GUID)
ip link add veth2 type veth peer name veth2p && ip link set veth2p master br0 && ip link set veth2p up && ip link set veth2 up || rc=1
export RELINK_VM_SPARE_NETDEV=veth2
for k in all default veth0 veth1 veth2; do
  # a packet whose source address is local must be accepted
  echo 0 > /proc/sys/net/ipv4/conf/$k/rp_filter || rc=1
  echo 1 > /proc/sys/net/ipv4/conf/$k/accept_local || rc=1
  echo 1 > /proc/sys/net/ipv4/conf/$k/arp_ignore
  echo 2 > /proc/sys/net/ipv4/conf/$k/arp_announce
done
ip -br addr | sed 's/^/  /'
endstep $rc

if [ -n "${VM_NETEM_LOSS:-}" ]; then
# A lossy wire (run.sh --netem-loss): the bridge ports drop packets each
# way between the first pair (veth1p carries .1 -> .2, veth0p the answers),
# so rxe retransmits, NAKs sequence errors and replays responses.
step setup netem_loss
rc=0
for p in veth0p veth1p; do
  tc qdisc add dev $p root netem loss "${VM_NETEM_LOSS}%" || rc=1
done
tc qdisc show | grep netem | sed 's/^/  /'
endstep $rc
fi

step setup rxe_add
rc=0
tx rdma link add rxe0 type rxe netdev veth0 || rc=1
tx rdma link add rxe1 type rxe netdev veth1 || rc=1
rdma link show | sed 's/^/  /'
endstep $rc

step setup policy_routing   # make .1 <-> .2 really cross veth0 -> br0 -> veth1
rc=0
ip rule add pref 100 lookup local && ip rule del pref 0 lookup local || rc=1
ip rule add pref 10 from 10.10.0.1 to 10.10.0.2 iif lo lookup 102 || rc=1
ip rule add pref 11 from 10.10.0.2 to 10.10.0.1 iif lo lookup 101 || rc=1
policy_routes veth0 veth1
ip rule | sed 's/^/  /'
x ip route get 10.10.0.2 from 10.10.0.1
ping -c 1 -W 2 -I 10.10.0.1 10.10.0.2 >/dev/null 2>&1 || { echo "  ping 10.10.0.1 -> 10.10.0.2 failed"; rc=1; }
endstep $rc

############################################################################
if want sanity; then
step sanity ibv_devices
x ibv_devices > /tmp/ibv.out 2>&1; rc=$?
sed 's/^/  /' /tmp/ibv.out
grep -q rxe0 /tmp/ibv.out && grep -q rxe1 /tmp/ibv.out || rc=1
endstep $rc

step sanity ibv_devinfo_ports_active
rc=0
for d in rxe0 rxe1; do
  timeout 20 ibv_devinfo -d $d > /tmp/devinfo.$d 2>&1 || rc=1
  st=$(awk '/state:/{print $2; exit}' /tmp/devinfo.$d)
  echo "  $d: port state $st, node_guid $(cat /sys/class/infiniband/$d/node_guid)"
  [ "$st" = PORT_ACTIVE ] || { rc=1; sed 's/^/  | /' /tmp/devinfo.$d; }
done
endstep $rc

step sanity rping_rxe0_rxe1   # rdma_cm + RC SEND/READ/WRITE across the bridge
c0=$(cnt rxe0); c1=$(cnt rxe1)
rping -s -a 10.10.0.2 -p 7170 -v > /tmp/rping.srv 2>&1 & spid=$!
wait_listen 10.10.0.2 7170
timeout 60 rping -c -a 10.10.0.2 -I 10.10.0.1 -p 7170 -C 20 -v > /tmp/rping.cli 2>&1; rc=$?
wait_for 10 gone $spid || kill $spid 2>/dev/null
wait $spid 2>/dev/null
n=$(grep -c 'ping data' /tmp/rping.cli)
echo "  client rc=$rc pings=$n/20; pkts sent/rcvd rxe0 $c0 -> $(cnt rxe0), rxe1 $c1 -> $(cnt rxe1)"
grep -v 'ping data' /tmp/rping.cli /tmp/rping.srv | head -10 | sed 's/^/  | /'
[ "$n" = 20 ] || rc=1
NOTE="$n/20 pings"
endstep $rc

step sanity ib_write_bw_rxe0_rxe1   # perftest RC RDMA WRITE, rxe0 -> rxe1
g0=$(gid_idx rxe0 10.10.0.1); g1=$(gid_idx rxe1 10.10.0.2)
echo "  RoCE v2 gid index rxe0=$g0 rxe1=$g1"
ib_write_bw -d rxe1 -x "$g1" -n 500 -p 18515 > /tmp/bw.srv 2>&1 & spid=$!
# until the server listens on its TCP port (18515 = 0x4853) for the key exchange
wait_for 15 grep -q ':4853 00000000:0000 0A' /proc/net/tcp || echo "  (server not listening on 18515 after 15 s)"
timeout 60 ib_write_bw -d rxe0 -x "$g0" -n 500 -p 18515 10.10.0.2 > /tmp/bw.cli 2>&1; rc=$?
wait_for 10 gone $spid || { echo "  server still running 10 s after the client"; kill $spid 2>/dev/null; rc=1; }
wait $spid 2>/dev/null || rc=1
if [ $rc = 0 ]; then
  grep -vE '^ *-+$|^\*|^ *$' /tmp/bw.cli | tail -2 | sed 's/^/  cli| /'
else
  echo "  client rc=$rc"; sed 's/^/  cli| /' /tmp/bw.cli; sed 's/^/  srv| /' /tmp/bw.srv
fi
NOTE="$(awk '$1==65536{print $4" MB/s avg"}' /tmp/bw.cli)"
endstep $rc

sbw_port_free() { ! grep -q ':4854 00000000:0000 0A' /proc/net/tcp; }
step sanity ib_send_bw_64B_rxe0_rxe1   # perftest RC SEND of 64 B: the message-rate reference
# perftest's own end-of-test exchange (over its TCP socket) fails now and
# then on a loaded TCG guest ("Couldn't read remote address"): a failed run
# is shown whole and run once more; the note says when it took two.
for try in 1 2; do
  ib_send_bw -d rxe1 -x "$g1" -s 64 -n 5000 -p 18516 > /tmp/sbw.srv 2>&1 & spid=$!
  wait_for 15 grep -q ':4854 00000000:0000 0A' /proc/net/tcp || echo "  (server not listening on 18516 after 15 s)"
  timeout 60 ib_send_bw -d rxe0 -x "$g0" -s 64 -n 5000 -p 18516 10.10.0.2 > /tmp/sbw.cli 2>&1; rc=$?
  wait_for 10 gone $spid || { echo "  server still running 10 s after the client"; kill $spid 2>/dev/null; rc=1; }
  wait $spid 2>/dev/null || rc=1
  if [ $rc = 0 ]; then
    grep -vE '^ *-+$|^\*|^ *$' /tmp/sbw.cli | tail -2 | sed 's/^/  cli| /'
    break
  fi
  echo "  try $try: client rc=$rc"; sed 's/^/  cli| /' /tmp/sbw.cli; sed 's/^/  srv| /' /tmp/sbw.srv
  # Let the listening socket go before the second try.
  wait_for 5 sbw_port_free || true
done
NOTE="$(awk '$1==64{print $4" MB/s avg, "$5" Mpps"}' /tmp/sbw.cli)"
[ $rc = 0 ] && [ $try = 2 ] && NOTE="$NOTE (second try)"
endstep $rc

slat_port_free() { ! grep -q ':4855 00000000:0000 0A' /proc/net/tcp; }
# perftest RC SEND ping-pong, 8 B and 4 KiB: the latency reference next to
# the bench group's rxe-pingpong series. ib_send_lat reports half a round
# trip (its t_typical is the median of round trip / 2); the note gives the
# round trip (2 x t_typical) to compare with the bench's round trips.
for size in 8 4096; do
step sanity ib_send_lat_${size}B_rxe0_rxe1
for try in 1 2; do
  ib_send_lat -d rxe1 -x "$g1" -s $size -n 2000 -p 18517 > /tmp/slat.srv 2>&1 & spid=$!
  wait_for 15 grep -q ':4855 00000000:0000 0A' /proc/net/tcp || echo "  (server not listening on 18517 after 15 s)"
  timeout 60 ib_send_lat -d rxe0 -x "$g0" -s $size -n 2000 -p 18517 10.10.0.2 > /tmp/slat.cli 2>&1; rc=$?
  wait_for 10 gone $spid || { echo "  server still running 10 s after the client"; kill $spid 2>/dev/null; rc=1; }
  wait $spid 2>/dev/null || rc=1
  if [ $rc = 0 ]; then
    grep -vE '^ *-+$|^\*|^ *$' /tmp/slat.cli | tail -2 | sed 's/^/  cli| /'
    break
  fi
  echo "  try $try: client rc=$rc"; sed 's/^/  cli| /' /tmp/slat.cli; sed 's/^/  srv| /' /tmp/slat.srv
  wait_for 5 slat_port_free || true
done
NOTE="$(awk -v s=$size '$1==s{printf "rtt p50 %.1f us, p99 %.1f us (2 x t_typical %s, 2 x 99%% %s)", 2*$5, 2*$8, $5, $8}' /tmp/slat.cli)"
echo "RESULT perftest ib_send_lat size=$size kernel=$KV $NOTE"
[ $rc = 0 ] && [ $try = 2 ] && NOTE="$NOTE (second try)"
endstep $rc
done
fi

############################################################################
# one cargo test binary from /vm/tests.list
allowed_skip() { # allowed_skip group < line: which SKIPPED: lines are expected here
  l=$(cat)
  case "$1:$EXPECT:$l" in
    # Soft-RoCE has no device reset: no IBV_EVENT_DEVICE_FATAL can be injected
    verbs:*:"SKIPPED: reset_"*" on verbs: Soft-RoCE has no device reset"*) return 0 ;;
  esac
  return 1
}
run_test() { # run_test group name bin cwd args
  step "$1" "$2"
  echo "  + (cd $4 && $3 $5)"
  ( cd "$4" 2>/dev/null || cd /tmp; RUST_BACKTRACE=1 exec timeout "$TEST_TIMEOUT" "$3" $5 ) > /tmp/test.out 2>&1; rc=$?
  [ $rc = 124 ] || [ $rc = 143 ] && echo "  !!! timed out after ${TEST_TIMEOUT}s"
  sed 's/^/  | /' /tmp/test.out
  passed=$(awk '/^test result:/{for(i=1;i<=NF;i++) if($(i)~/^passed/) s+=$(i-1)} END{print s+0}' /tmp/test.out)
  failed=$(awk '/^test result:/{for(i=1;i<=NF;i++) if($(i)~/^failed/) s+=$(i-1)} END{print s+0}' /tmp/test.out)
  # a SKIPPED: line goes straight to stderr and may land mid-line, after
  # libtest's "test <name> ... " on stdout
  grep -o 'SKIPPED: .*' /tmp/test.out > /tmp/test.skips
  nskip=$(wc -l < /tmp/test.skips)
  bad=0
  while read -r l; do
    if echo "$l" | allowed_skip "$1"; then
      echo "  skip expected on $KV: $l"
      echo "RELINK_VM_SKIP|$1|$2|${l#SKIPPED: }"   # the host records it (scripts/skip.sh)
    else echo "  !!! unexpected skip in the VM: $l"; bad=$((bad+1)); fi
  done < /tmp/test.skips
  [ $bad -gt 0 ] && rc=1
  # libtest counts a case that printed SKIPPED: and returned as passed
  ok=$((passed - nskip)); [ $ok -lt 0 ] && ok=0
  NOTE="$ok passed, $failed failed"
  # a test's own figures (its last RELINK_VM_NOTE: line)
  tnote=$(grep -o 'RELINK_VM_NOTE: .*' /tmp/test.out | tail -1 | cut -d' ' -f2-)
  [ -n "$tnote" ] && NOTE="$tnote"
  [ -n "$tnote" ] && [ "$failed" != 0 ] && NOTE="FAILED; $tnote"
  if [ $nskip -gt 0 ]; then
    NOTE="$NOTE, $nskip skipped ($((nskip-bad)) expected here"
    [ $bad -gt 0 ] && NOTE="$NOTE, $bad NOT EXPECTED"
    NOTE="$NOTE)"
  fi
  endstep $rc
}
run_group_tests() { # run_group_tests group
  [ -f /vm/tests.list ] || return 0
  grep "^$1|" /vm/tests.list > /tmp/tests.$1
  while IFS='|' read -r g n b c a; do run_test "$g" "$n" "$b" "$c" "$a" < /dev/null; done < /tmp/tests.$1
}

if want devwatch; then
[ -n "$EXPECT" ] && export RELINK_DEVWATCH_EXPECT_BACKEND="$EXPECT"
if ! grep -q '^devwatch|' /vm/tests.list 2>/dev/null; then
  step devwatch test_binaries; echo "  !!! no devwatch test binaries in /vm/tests.list"; endstep 1
fi
run_group_tests devwatch
unset RELINK_DEVWATCH_EXPECT_BACKEND

# The watcher on a real hot-unplug: the devwatch example (report_existing)
# must pick the expected backend and report rxe1's removal and return.
step devwatch live_unplug_replug_rxe1
rc=0
if [ -x /vm/bin/devwatch-example ]; then
  /vm/bin/devwatch-example 120 > /tmp/dw.log 2>&1 & dwpid=$!
  wait_for 15 grep -q '^added rxe1' /tmp/dw.log || { echo "  no initial 'added rxe1' within 15 s"; rc=1; }
  backend=$(sed -n 's/^backend: \([^ ]*\).*/\1/p' /tmp/dw.log)
  echo "  backend: $backend (expected: ${EXPECT:-any})"
  [ -n "$EXPECT" ] && [ "$backend" != "$EXPECT" ] && rc=1
  T=$(ts)
  timeout 10 rdma link delete rxe1 || { echo "  !!! rdma link delete rxe1 failed or blocked"; rc=1; }
  Td=$(ts)
  if wait_for 10 grep -qE '^remov(ing|ed) rxe1' /tmp/dw.log; then
    rm_lat=$(dt "$T" "$(ts)")
  else echo "  !!! no removal event for rxe1 within 10 s"; rm_lat=none; rc=1; fi
  T2=$(ts)
  timeout 10 rdma link add rxe1 type rxe netdev veth1 || { echo "  !!! rdma link add rxe1 failed"; rc=1; }
  if wait_for 10 sh -c "[ \$(grep -c '^added rxe1' /tmp/dw.log) -ge 2 ]"; then
    add_lat=$(dt "$T2" "$(ts)")
  else echo "  !!! no 'added rxe1' after the re-add within 10 s"; add_lat=none; rc=1; fi
  kill $dwpid 2>/dev/null; wait $dwpid 2>/dev/null
  sed 's/^/  | /' /tmp/dw.log
  echo "  rdma link delete took $(dt "$T" "$Td")s; removal seen after ${rm_lat}s, re-add seen after ${add_lat}s"
  NOTE="backend $backend; removal seen ${rm_lat}s, add ${add_lat}s"
else
  echo "  !!! /vm/bin/devwatch-example not packed"; rc=1
fi
endstep $rc
fi

############################################################################
if want verbs; then
# DEV@ADDR@NETDEV of each side; the suite deletes and re-adds the devices,
# and replaces the target's by rxe2 on the spare veth2 (address and routes move)
export RELINK_VERBS_INITIATOR=rxe0@10.10.0.1@veth0 RELINK_VERBS_TARGET=rxe1@10.10.0.2@veth1
export RELINK_VERBS_SPARE=rxe2@$RELINK_VM_SPARE_NETDEV RELINK_VERBS_ROUTE_TABLES=102,101 RELINK_VERBS_PREFIX=24
# (not RELINK_FAIL_ON_SKIP: run_test fails every SKIPPED: line
# except those allowed_skip() lists as expected on Soft-RoCE)
if grep -q '^verbs|' /vm/tests.list 2>/dev/null; then
  run_group_tests verbs
else
  step verbs conformance; echo "  !!! no verbs test binaries in /vm/tests.list"; endstep 1
fi
unset RELINK_VERBS_INITIATOR RELINK_VERBS_TARGET RELINK_VERBS_SPARE RELINK_VERBS_ROUTE_TABLES RELINK_VERBS_PREFIX
fi

############################################################################
if want bench; then
# relink next to raw verbs on rxe0/rxe1 (the bench prints its figures,
# RESULT lines and a RELINK_VM_NOTE: for the table)
export RELINK_VERBS_INITIATOR=rxe0@10.10.0.1@veth0 RELINK_VERBS_TARGET=rxe1@10.10.0.2@veth1
if grep -q '^bench|' /vm/tests.list 2>/dev/null; then
  run_group_tests bench
else
  step bench rxe_relink_vs_raw; echo "  !!! no rxe bench in /vm/tests.list"; endstep 1
fi
unset RELINK_VERBS_INITIATOR RELINK_VERBS_TARGET
fi

############################################################################
if want sessions; then
# relink sessions with traffic across real device loss and planned
# outages (one step per scenario; crates/relink-verbs/tests/sessions_verbs.rs
# and its sessions_verbs/ files). A second device pair on other addresses,
# for failover and drains: veth3 (10.10.1.1, rxe3) <-> veth4
# (10.10.1.2, rxe4), forced onto the wire like the first pair.
step sessions setup_second_pair
rc=0
for v in veth3 veth4; do
  ip link add $v type veth peer name ${v}p && ip link set ${v}p master br0 && ip link set ${v}p up && ip link set $v up || rc=1
  echo 0 > /proc/sys/net/ipv4/conf/$v/rp_filter; echo 1 > /proc/sys/net/ipv4/conf/$v/accept_local
  echo 1 > /proc/sys/net/ipv4/conf/$v/arp_ignore; echo 2 > /proc/sys/net/ipv4/conf/$v/arp_announce
done
ip addr add 10.10.1.1/24 dev veth3 && ip addr add 10.10.1.2/24 dev veth4 || rc=1
ip rule add pref 12 from 10.10.1.1 to 10.10.1.2 iif lo lookup 104 || rc=1
ip rule add pref 13 from 10.10.1.2 to 10.10.1.1 iif lo lookup 103 || rc=1
ip route replace 10.10.1.2 dev veth3 src 10.10.1.1 table 104 || rc=1
ip route replace 10.10.1.1 dev veth4 src 10.10.1.2 table 103 || rc=1
tx rdma link add rxe3 type rxe netdev veth3 || rc=1
tx rdma link add rxe4 type rxe netdev veth4 || rc=1
ping -c 1 -W 2 -I 10.10.1.1 10.10.1.2 >/dev/null 2>&1 || { echo "  ping 10.10.1.1 -> 10.10.1.2 failed"; rc=1; }
rdma link show | sed 's/^/  /'
endstep $rc
export RELINK_VERBS_INITIATOR=rxe0@10.10.0.1@veth0 RELINK_VERBS_TARGET=rxe1@10.10.0.2@veth1
export RELINK_VERBS_SPARE=rxe2@$RELINK_VM_SPARE_NETDEV RELINK_VERBS_ROUTE_TABLES=102,101 RELINK_VERBS_PREFIX=24
export RELINK_VERBS_SECOND_INITIATOR=rxe3@10.10.1.1@veth3 RELINK_VERBS_SECOND_TARGET=rxe4@10.10.1.2@veth4
if grep -q '^sessions|' /vm/tests.list 2>/dev/null; then
  run_group_tests sessions
else
  step sessions scenarios; echo "  !!! no session scenarios in /vm/tests.list"; endstep 1
fi
unset RELINK_VERBS_INITIATOR RELINK_VERBS_TARGET RELINK_VERBS_SPARE RELINK_VERBS_ROUTE_TABLES RELINK_VERBS_PREFIX
unset RELINK_VERBS_SECOND_INITIATOR RELINK_VERBS_SECOND_TARGET
rdma link delete rxe4 2>/dev/null; rdma link delete rxe3 2>/dev/null
fi

############################################################################
if want capi; then
# The C ping-pong on rxe: the server on rxe1 (10.10.0.2), the client on
# rxe0; after 1000 rounds rxe1 is deleted and added again. The client
# checks every pong and completion itself and must have resumed.
step capi c_ping_pong_rxe
rc=0
if [ -x /vm/bin/c-ping-pong ]; then
  /vm/bin/c-ping-pong verbs server 10.10.0.2:7490 > /tmp/cpp.srv 2>&1 & spid=$!
  wait_listen 10.10.0.2 7490 || rc=1
  /vm/bin/c-ping-pong verbs client 10.10.0.2:7490 2500 > /tmp/cpp.cli 2>&1 & cpid=$!
  if wait_for 60 grep -q 'answered 1000' /tmp/cpp.cli; then
    tx rdma link delete rxe1 || rc=1
    tx rdma link add rxe1 type rxe netdev veth1 || rc=1
  else
    echo "  !!! the client did not reach 1000 rounds in 60 s"; rc=1
  fi
  wait_for 120 gone $cpid || { echo "  !!! the client still runs after 120 s"; kill $cpid; rc=1; }
  wait $cpid || rc=1
  wait_for 20 gone $spid || { echo "  !!! the server still runs 20 s after its client"; kill $spid; rc=1; }
  wait $spid || rc=1
  sed 's/^/  cli| /' /tmp/cpp.cli | tail -12
  sed 's/^/  srv| /' /tmp/cpp.srv | tail -6
  res=$(grep '^RESULT' /tmp/cpp.cli)
  resumes=$(echo "$res" | sed -n 's/.*resumes=\([0-9]*\).*/\1/p')
  [ -n "$resumes" ] && [ "$resumes" -ge 1 ] || { echo "  !!! the client did not resume: '$res'"; rc=1; }
  grep -q '^RESULT role=server answered=2500' /tmp/cpp.srv || { echo "  !!! the server did not answer 2500"; rc=1; }
  NOTE="${res#RESULT }"
else
  echo "  !!! no /vm/bin/c-ping-pong"; rc=1
fi
endstep $rc
fi

############################################################################
if want example; then
# The verbs_write example, both roles, as a user would run them on two
# hosts (crates/relink-verbs/examples/verbs_write.rs).
step example verbs_write
rc=0
if [ -x /vm/bin/verbs-example-write ]; then
  /vm/bin/verbs-example-write server 10.10.0.2:7480 > /tmp/ex.srv 2>&1 & spid=$!
  wait_listen 10.10.0.2 7480 || rc=1
  timeout 60 /vm/bin/verbs-example-write client 10.10.0.1 10.10.0.2:7480 > /tmp/ex.cli 2>&1; crc=$?
  wait_for 20 gone $spid || { echo "  !!! the server still runs 20 s after the client"; kill $spid 2>/dev/null; }
  wait $spid; src=$?
  sed 's/^/  client| /' /tmp/ex.cli
  sed 's/^/  server| /' /tmp/ex.srv
  echo "  client rc=$crc, server rc=$src"
  [ $crc = 0 ] && [ $src = 0 ] || rc=1
  NOTE=$(grep -o 'RELINK_VM_NOTE: .*' /tmp/ex.cli | tail -1 | cut -d' ' -f2-)
  [ $rc = 0 ] || NOTE="FAILED: client rc=$crc, server rc=$src"
else
  echo "  !!! /vm/bin/verbs-example-write not packed"; rc=1
fi
endstep $rc
fi

############################################################################
if want relinkd; then
# Two relinkd processes on rdma-core: the target exports a file on
# 10.10.0.2 (rxe1), the initiator (source 10.10.0.1: rxe0) serves it on an
# NBD socket. qemu-img writes a random image through the socket (one
# request at a time, rate limited so the device events land inside the
# copy) while the target's device is deleted and added, then the
# initiator's, then the target's is replaced by rxe2 on the same netdev;
# the image is read back through NBD and from the target's file. The note
# gives each event's stall (the longest gap between qemu-img's progress
# reports, one per 2 MiB request, ~0.5 s apart without an event, in the
# two after the event) and the longest gap without an event.
step relinkd nbd_copy_across_resets
rc=0
RD=/tmp/relinkd; rm -rf $RD; mkdir -p $RD
MB=32 RATE=4
if [ -x /vm/bin/relinkd ] && [ -x /vm/bin/qemu-img ]; then
  dd if=/dev/urandom of=$RD/src.img bs=1M count=$MB 2>/dev/null
  dd if=/dev/zero of=$RD/disk0.img bs=1M count=$MB 2>/dev/null
  printf '[backend]\nkind = "rdma-core"\n[[export]]\nname = "disk0"\nlisten = "10.10.0.2:7471"\nfile = "%s"\n' \
    $RD/disk0.img > $RD/target.toml
  printf '[backend]\nkind = "rdma-core"\nsource = "10.10.0.1"\n[[connect]]\nname = "disk0"\ntargets = ["10.10.0.2:7471"]\nnbd_socket = "%s"\ngive_up_secs = 60\n' \
    $RD/disk0.sock > $RD/initiator.toml
  /vm/bin/relinkd $RD/target.toml > $RD/target.log 2>&1 & tpid=$!
  wait_listen 10.10.0.2 7471 || rc=1
  /vm/bin/relinkd $RD/initiator.toml > $RD/initiator.log 2>&1 & ipid=$!
  wait_for 20 grep -q '^connect disk0 ready' $RD/initiator.log || { echo "  !!! the initiator is not ready after 20 s"; rc=1; }
  URL="nbd+unix:///disk0?socket=$RD/disk0.sock"
  # each progress report (\r-terminated) with the guest's uptime before it
  ( qemu-img convert -p -n -m 1 -r ${RATE}M -f raw -O raw $RD/src.img "$URL"; echo $? > $RD/qemu.rc ) 2>&1 |
    awk 'BEGIN{RS="\r"} {getline u < "/proc/uptime"; close("/proc/uptime"); split(u, a, " "); gsub(/\n/, " "); print a[1], $0; fflush()}' \
    > $RD/progress & qpid=$!
  pct() { tail -1 $RD/progress 2>/dev/null | sed -n 's/.*(\([0-9]*\)\.[0-9]*\/100%).*/\1/p'; }
  at() { p_=$(pct); [ -n "$p_" ] && [ "$p_" -ge "$1" ]; }
  event() { # event <percent> <label> <commands...>: once the copy is past <percent>
    # (the label is one word: it names the event in the note)
    p=$1; l=$2; shift 2
    if ! wait_for 120 at "$p"; then echo "  !!! the copy did not reach $p% within 120 s (before: $l)"; rc=1; return; fi
    if [ -s $RD/qemu.rc ]; then echo "  !!! the copy ended before: $l"; rc=1; return; fi
    echo "$(ts) EVENT $l" >> $RD/events
    echo "  at $(pct)%: $l"
    "$@" || rc=1
  }
  del_add() { tx timeout 10 rdma link delete "$1" && sleep 1 && tx rdma link add "$2" type rxe netdev "$3"; }
  event 15 target_rxe1_delete_add del_add rxe1 rxe1 veth1
  event 45 initiator_rxe0_delete_add del_add rxe0 rxe0 veth0
  event 75 target_rxe1_replaced_by_rxe2 del_add rxe1 rxe2 veth1
  wait_for 180 gone $qpid || { echo "  !!! qemu-img convert still runs after 180 s"; kill $qpid 2>/dev/null; rc=1; }
  wait $qpid 2>/dev/null
  qrc=$(cat $RD/qemu.rc 2>/dev/null); echo "  qemu-img convert rc=${qrc:-none}"
  [ "$qrc" = 0 ] || rc=1
  # each event's stall: the longer of the two gaps between progress
  # reports after it (the request under way at the event may still
  # complete, the next one waits for the recovery); and the longest gap
  # without an event (a repeated report, qemu-img's last, is not progress)
  stall=$(cat $RD/events $RD/progress 2>/dev/null | sort -n | awk '
    function flush() { out = out sep ev " " sprintf("%.2fs", cur); sep = ", "; ev = ""; cur = 0; n = 0 }
    $2 == "EVENT" {if (ev != "") flush(); ev = $3; n = 2; next}
    $2 ~ /^\(/ && $2 != last {
      if (prev != "") {
        g = $1 - prev
        if (n > 0) { if (g > cur) cur = g; n--; if (n == 0) flush() }
        else if (g > other) other = g
      }
      prev = $1; last = $2
    }
    END{if (ev != "") flush(); printf "stalls: %s; longest gap without an event %.2fs", out, other}')
  echo "  $stall"
  echo "  progress reports:"; tr '\n' ' ' < $RD/progress | fold -w 150 | sed 's/^/  | /'; echo
  tx timeout 60 qemu-img compare -f raw -F raw $RD/src.img "$URL" || { echo "  !!! read back through NBD differs"; rc=1; }
  kill -TERM $ipid; wait_for 40 gone $ipid || { echo "  !!! the initiator still runs 40 s after SIGTERM"; kill -9 $ipid; rc=1; }
  wait $ipid; irc=$?
  kill -TERM $tpid; wait_for 40 gone $tpid || { echo "  !!! the target still runs 40 s after SIGTERM"; kill -9 $tpid; rc=1; }
  wait $tpid; trc=$?
  echo "  initiator rc=$irc, target rc=$trc"
  [ $irc = 0 ] && [ $trc = 0 ] || rc=1
  cmp $RD/src.img $RD/disk0.img || { echo "  !!! the target's file differs from the image"; rc=1; }
  sed 's/^/  initiator| /' $RD/initiator.log | tail -25
  sed 's/^/  target| /' $RD/target.log | tail -15
  NOTE="$MB MiB at $RATE MiB/s; $stall"
  [ $rc = 0 ] || NOTE="FAILED; $NOTE"
else
  echo "  !!! /vm/bin/relinkd or /vm/bin/qemu-img not packed"; rc=1
fi
# rxe1 back on veth1 for the steps after this one
[ -d /sys/class/infiniband/rxe2 ] && tx timeout 10 rdma link delete rxe2
[ -d /sys/class/infiniband/rxe1 ] || tx rdma link add rxe1 type rxe netdev veth1 || rc=1
[ -d /sys/class/infiniband/rxe0 ] || tx rdma link add rxe0 type rxe netdev veth0 || rc=1
endstep $rc

# relinkd's NBD throughput on rxe, next to `nbdkit file` and the local file
# (the soft fabric's crates/relinkd/benches/nbd.rs with the same qemu-img
# bench parameters): a fresh target (rxe1) and initiator (rxe0) pair on a
# 64 MiB file; `qemu-img bench` writes WN x 1 MiB sequentially and reads
# RN x 4 KiB at a stride of 7919 blocks (modulo the image), both at queue
# depth 16, against (a) the initiator's NBD socket, (b) `nbdkit file` on a
# Unix socket over a file of the same size (SKIPPED when not packed), (c)
# the local file. One "RESULT relinkd_nbd_rxe ..." line; the note repeats it.
step relinkd nbd_throughput
rc=0
RT=/tmp/relinkd-tp; rm -rf $RT; mkdir -p $RT
SIZE=64 WN=64 RN=2000 STRIDE=$((7919 * 4096))
KIT_PLUGIN=/usr/lib/x86_64-linux-gnu/nbdkit/plugins/nbdkit-file-plugin.so
qb() { # qb <target> <qemu-img bench args...>: the run's seconds
  t_=$1; shift
  o_=$(timeout 120 qemu-img bench -f raw "$@" "$t_" 2>&1); r_=$?
  s_=$(echo "$o_" | sed -n 's/^Run completed in \([0-9.]*\) seconds.*/\1/p')
  if [ $r_ != 0 ] || [ -z "$s_" ]; then echo "  !!! qemu-img bench $* $t_ (rc=$r_): $o_" >&2; return 1; fi
  echo "$s_"
}
nbd_tp() { # nbd_tp <label> <target>: "<MiB/s of writes> <reads/s>", each run logged
  ws=$(qb "$2" -w -c $WN -d 16 -s 1M) || return 1
  rs=$(qb "$2" -c $RN -d 16 -s 4K -S $STRIDE) || return 1
  echo "  $1: $WN x 1 MiB writes in ${ws}s, $RN x 4 KiB reads in ${rs}s" >&2
  awk -v w=$WN -v ws=$ws -v r=$RN -v rs=$rs 'BEGIN{printf "%.1f %.0f", w / ws, r / rs}'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{if (a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.2f", a / b}'; }
if [ -x /vm/bin/relinkd ] && [ -x /vm/bin/qemu-img ]; then
  for f in volume kit local; do dd if=/dev/zero of=$RT/$f.img bs=1M count=0 seek=$SIZE 2>/dev/null; done
  printf '[backend]\nkind = "rdma-core"\n[[export]]\nname = "disk"\nlisten = "10.10.0.2:7472"\nfile = "%s"\n' \
    $RT/volume.img > $RT/target.toml
  printf '[backend]\nkind = "rdma-core"\nsource = "10.10.0.1"\n[[connect]]\nname = "disk"\ntargets = ["10.10.0.2:7472"]\nnbd_socket = "%s"\ngive_up_secs = 60\n' \
    $RT/disk.sock > $RT/initiator.toml
  /vm/bin/relinkd $RT/target.toml > $RT/target.log 2>&1 & tpid=$!
  wait_listen 10.10.0.2 7472 || rc=1
  /vm/bin/relinkd $RT/initiator.toml > $RT/initiator.log 2>&1 & ipid=$!
  wait_for 20 grep -q '^connect disk ready' $RT/initiator.log || { echo "  !!! the initiator is not ready after 20 s"; rc=1; }
  c0="$(cnt rxe0) $(cnt rxe1)"
  R=$(nbd_tp relinkd "nbd+unix:///disk?socket=$RT/disk.sock") || { R=; rc=1; }
  # The fabric's own bandwidth in the same VM: perftest's RDMA WRITE and
  # READ of 128 KiB messages (relinkd's max_io: each 1 MiB write moved as
  # 8 RDMA READs of 128 KiB by the target, each read as RDMA WRITEs) rxe0
  # -> rxe1; perftest's MB is 2^20 bytes. "-" if one failed (shown, not a
  # failure of the step: they are the reference, not relinkd). The write
  # ratio is the median of three pairs taken side by side (relinkd's
  # writes, then ib_write_bw, the daemons idle meanwhile), so a slow spell
  # of the machine hits both sides of a pair alike.
  g0=$(gid_idx rxe0 10.10.0.1); g1=$(gid_idx rxe1 10.10.0.2)
  perf_bw() { # perf_bw <ib_write_bw|ib_read_bw> <port>: MB/s of 300 x 128 KiB
    hx=$(printf '%04X' "$2")
    $1 -d rxe1 -x "$g1" -s 131072 -n 300 -p "$2" > $RT/$1.srv 2>&1 & spid=$!
    wait_for 15 grep -q ":$hx 00000000:0000 0A" /proc/net/tcp || echo "  ($1 server not listening on $2 after 15 s)" >&2
    if timeout 60 $1 -d rxe0 -x "$g0" -s 131072 -n 300 -p "$2" 10.10.0.2 > $RT/$1.cli 2>&1; then
      awk '$1==131072{printf "%.1f", $4}' $RT/$1.cli
    else
      echo "  $1 failed:" >&2; sed 's/^/  cli| /' $RT/$1.cli >&2; sed 's/^/  srv| /' $RT/$1.srv >&2
    fi
    wait_for 10 gone $spid || kill $spid 2>/dev/null
    wait $spid 2>/dev/null
  }
  PAIRS=; WS=; RS=
  for i_ in 1 2 3; do
    ws_=$(qb "nbd+unix:///disk?socket=$RT/disk.sock" -w -c $WN -d 16 -s 1M) || { rc=1; break; }
    w_=$(awk -v w=$WN -v s=$ws_ 'BEGIN{printf "%.1f", w / s}')
    p_=$(perf_bw ib_write_bw $((18520 + 2 * i_))); p_=${p_:--}
    PAIRS="$PAIRS $w_/$p_"; WS="$WS $p_"; RS="$RS $(ratio "$w_" "$p_")"
  done
  med3() { printf '%s\n' "$@" | grep -v -- '^-$' | sort -n | awk '{v[NR]=$1} END{if (NR == 0) print "-"; else print v[int((NR + 1) / 2)]}'; }
  WR=$(med3 $RS); WR=${WR:--}
  W=$(med3 $WS); W=${W:--}
  echo "  relinkd 1 MiB writes MiB/s / ib_write_bw 128 KiB MB/s, side by side:$PAIRS; median ratio $WR"
  echo "  rxe0/rxe1 sent/rcvd packets before: $c0, after: $(cnt rxe0) $(cnt rxe1)"
  K=
  if [ -x /vm/bin/nbdkit ] && [ -f $KIT_PLUGIN ]; then
    nbdkit -f -U $RT/kit.sock file file=$RT/kit.img > $RT/nbdkit.log 2>&1 & kpid=$!
    if wait_for 20 test -S $RT/kit.sock; then
      K=$(nbd_tp nbdkit "nbd+unix:///?socket=$RT/kit.sock") || { K=; rc=1; }
    else
      echo "  !!! nbdkit did not listen within 20 s: $(cat $RT/nbdkit.log)"; rc=1
    fi
    kill -TERM $kpid 2>/dev/null; wait $kpid 2>/dev/null
  else
    echo "  SKIPPED: nbdkit baseline: /vm/bin/nbdkit or $KIT_PLUGIN not packed (apt-get install nbdkit on the host)"
  fi
  L=$(nbd_tp local $RT/local.img) || { L=; rc=1; }
  kill -TERM $ipid; wait_for 40 gone $ipid || { echo "  !!! the initiator still runs 40 s after SIGTERM"; kill -9 $ipid; rc=1; }
  wait $ipid; irc=$?
  kill -TERM $tpid; wait_for 40 gone $tpid || { echo "  !!! the target still runs 40 s after SIGTERM"; kill -9 $tpid; rc=1; }
  wait $tpid; trc=$?
  echo "  initiator rc=$irc, target rc=$trc"
  [ $irc = 0 ] && [ $trc = 0 ] || rc=1
  # perftest's RDMA READ of 128 KiB, with the daemons gone.
  RB=$(perf_bw ib_read_bw 18520); RB=${RB:--}
  echo "  128 KiB x 300, MB/s (perftest's MB: 2^20 B): ib_write_bw $W (median), ib_read_bw $RB"
  set -- ${R:-- -} ${K:-- -} ${L:-- -}
  RES="writes MiB/s relinkd $1 nbdkit $3 local $5 ib_write_bw(128K) $W ib_read_bw(128K) $RB; 4K reads/s relinkd $2 nbdkit $4 local $6;"
  RES="$RES relinkd/nbdkit $(ratio "$1" "$3") $(ratio "$2" "$4"); relinkd/local $(ratio "$1" "$5") $(ratio "$2" "$6");"
  RES="$RES relinkd writes/ib_write_bw $WR (median of 3 side by side:$PAIRS), /ib_read_bw $(ratio "$1" "$RB")"
  echo "RESULT relinkd_nbd_rxe kernel=$KV $WN x 1M writes, $RN x 4K reads, qd 16: $RES"
  [ $rc = 0 ] || { sed 's/^/  initiator| /' $RT/initiator.log | tail -15; sed 's/^/  target| /' $RT/target.log | tail -10; }
  NOTE="$RES"
  [ $rc = 0 ] || NOTE="FAILED; $NOTE"
else
  echo "  !!! /vm/bin/relinkd or /vm/bin/qemu-img not packed"; rc=1
fi
rm -rf $RT
endstep $rc
fi

############################################################################
if want ofi; then
# The libfabric provider on rdma-core (FI_RELINK_BACKEND=verbs): each side
# takes its own device by address (FI_RELINK_ADDR), the server or rank 1
# rxe1 (10.10.0.2), the client or rank 0 rxe0 (10.10.0.1).
OFI="FI_PROVIDER_PATH=/vm/ofi FI_RELINK_BACKEND=verbs FI_RELINK_LOG=relink_core::session::recovery=info"
ofi_env() { a_=$1; shift; env $OFI FI_PROVIDER=relink FI_RELINK_ADDR="$a_" "$@"; }
# fi_pingpong through relink next to libfabric's own verbs provider on
# the same pair, its data checked (-c), no fault: the figures. fi_pingpong
# has no source address, and a route lookup without one finds 10.10.0.2
# local (verbs would loop inside rxe1): for the verbs pairs a rule sends
# every lookup to 10.10.0.2 over veth0 (rxe0), as relink's explicit
# source does.
step ofi fi_pingpong_rxe
rc=0
pp() { # pp NAME PROVIDER EP SERVER_ENV CLIENT_ENV PORT: one fi_pingpong pair, its client's rows
  env $4 timeout 60 fi_pingpong -p "$2" -e "$3" -c -I 100 -d rxe1 -B "$6" > /tmp/pp.srv 2>&1 & spid=$!
  sleep 1
  env $5 timeout 60 fi_pingpong -p "$2" -e "$3" -c -I 100 -d rxe0 -P "$6" 10.10.0.2 > /tmp/pp.cli 2>&1; crc=$?
  wait $spid; src=$?
  echo "  $1 (client rc=$crc, server rc=$src):"
  sed 's/^/    /' /tmp/pp.cli
  [ $crc = 0 ] && [ $src = 0 ] || { sed 's/^/    srv| /' /tmp/pp.srv | tail -8; return 1; }
  lat=$(awk '$1=="64"{print $7}' /tmp/pp.cli)
  bw=$(awk '$1=="1m"{print $6}' /tmp/pp.cli)
  NOTE="${NOTE:+$NOTE, }$1 64 B ${lat:-?} us 1 MiB ${bw:-?} MB/s"
}
# The baseline is libfabric's, not relink's: its failure is reported,
# not counted. ("verbs;ofi_rxm" is no baseline on rxe: rxm asks rxe for
# a CQ larger than it offers, and fi_enable fails.)
ip rule add to 10.10.0.2 iif lo lookup 102 pref 12
pp "verbs msg" verbs msg "" "" 7600 || echo "  (the baseline failed: libfabric's own verbs provider on rxe)"
ip rule del pref 12
pp "relink msg" relink msg "$OFI FI_RELINK_ADDR=10.10.0.2" "$OFI FI_RELINK_ADDR=10.10.0.1" 7601 || rc=1
pp "relink;ofi_rxm rdm" "relink;ofi_rxm" rdm "$OFI FI_RELINK_ADDR=10.10.0.2" "$OFI FI_RELINK_ADDR=10.10.0.1" 7602 || rc=1
endstep $rc

# The project's libfabric RMA check (fi_writedata, fi_inject_writedata,
# fi_read; tests/ofi/rma.c) while rxe1 and then rxe0 are deleted and
# added again: every round's notice once and in order, its bytes checked.
step ofi rma_across_delete_add
rc=0
ROUNDS=${VM_OFI_RMA_ROUNDS:-20000}
ofi_env 10.10.0.2 /vm/bin/ofi-rma -s 10.10.0.2 7610 "$ROUNDS" > /tmp/rma.srv 2>&1 & spid=$!
wait_listen 10.10.0.2 7610 || rc=1
ofi_env 10.10.0.1 /vm/bin/ofi-rma -c 10.10.0.2 7610 "$ROUNDS" > /tmp/rma.cli 2>&1 & cpid=$!
if wait_for 60 grep -q ' 1000 rounds written' /tmp/rma.cli; then
  tx rdma link delete rxe1 || rc=1
  tx rdma link add rxe1 type rxe netdev veth1 || rc=1
  n=$(grep -c 'rounds written' /tmp/rma.cli)
  wait_for 60 sh -c "[ \$(grep -c 'rounds written' /tmp/rma.cli) -gt $((n + 1)) ]" ||
    { echo "  !!! no progress within 60 s of rxe1's return"; rc=1; }
  tx rdma link delete rxe0 || rc=1
  tx rdma link add rxe0 type rxe netdev veth0 || rc=1
  alive $cpid || { echo "  !!! the client ended before the second delete/add: raise VM_OFI_RMA_ROUNDS"; rc=1; }
else
  echo "  !!! the client did not reach 1000 rounds in 60 s"; rc=1
fi
wait_for 240 gone $cpid || { echo "  !!! the client still runs after 240 s"; kill $cpid; rc=1; }
wait $cpid || rc=1
wait_for 30 gone $spid || { echo "  !!! the server still runs 30 s after its client"; kill $spid; rc=1; }
wait $spid || rc=1
grep -v 'rounds written' /tmp/rma.cli | sed 's/^/  cli| /' | tail -12
sed 's/^/  srv| /' /tmp/rma.srv | tail -8
grep -q "^rma server: $ROUNDS notices once each and in order" /tmp/rma.srv || { echo "  !!! the server did not check every round"; rc=1; }
grep -q 'read-back checked' /tmp/rma.cli || { echo "  !!! the client did not finish"; rc=1; }
losses=$(cat /tmp/rma.cli /tmp/rma.srv | grep -c 'transport lost')
[ "$losses" -ge 2 ] || { echo "  !!! relink saw $losses transport losses for 2 deletes"; rc=1; }
NOTE="$ROUNDS rounds once each, $losses transport losses"
endstep $rc

# Open MPI (mpirun, mtl ofi over relink;ofi_rxm) runs the project's
# checked MPI program (tests/mpi/check.c) with two ranks, rank 0 on rxe0
# and rank 1 on rxe1, while rxe1 and then rxe0 are deleted and added
# again: every payload checked, no MPI error.
step ofi mpi_across_delete_add
rc=0
cat > /tmp/on-dev.sh <<'W'
#!/bin/sh
# a rank's device: rank 0 on 10.10.0.1 (rxe0), rank 1 on 10.10.0.2 (rxe1)
export FI_RELINK_ADDR=10.10.0.$((OMPI_COMM_WORLD_RANK + 1))
exec "$@"
W
chmod +x /tmp/on-dev.sh
SECS=${VM_OFI_MPI_SECONDS:-30}
# Open MPI refuses the kernel's default node name "(none)"
[ "$(hostname)" = "(none)" ] && hostname relink-vm
env $OFI /usr/bin/orterun --allow-run-as-root --oversubscribe -np 2 \
    --mca plm isolated --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include relink \
    -x FI_PROVIDER_PATH -x FI_RELINK_BACKEND -x FI_RELINK_LOG -x RDMAV_ALLOW_DISASSOC_DESTROY \
    /tmp/on-dev.sh /vm/bin/ofi-mpi-check "$SECS" > /tmp/mpi.out 2>&1 & mpid=$!
wait_for 120 sh -c "[ \$(grep -c ': running' /tmp/mpi.out) -ge 2 ] || ! kill -0 $mpid 2>/dev/null"
if [ "$(grep -c ': running' /tmp/mpi.out)" -ge 2 ]; then
  sleep 2
  tx rdma link delete rxe1 || rc=1
  tx rdma link add rxe1 type rxe netdev veth1 || rc=1
  sleep 5
  tx rdma link delete rxe0 || rc=1
  tx rdma link add rxe0 type rxe netdev veth0 || rc=1
  alive $mpid || { echo "  !!! the job ended before the second delete/add: raise VM_OFI_MPI_SECONDS"; rc=1; }
else
  echo "  !!! the ranks did not start within 120 s (or mpirun ended)"; rc=1
fi
wait_for 300 gone $mpid || { echo "  !!! the job still runs after 300 s"; kill $mpid; rc=1; }
wait $mpid || { echo "  !!! mpirun failed"; rc=1; }
grep -v 'transport lost' /tmp/mpi.out | sed 's/^/  | /' | tail -25
for r in 0 1; do
  grep -q "check: rank $r of 2: OK" /tmp/mpi.out || { echo "  !!! rank $r did not pass"; rc=1; }
done
losses=$(grep -c 'transport lost' /tmp/mpi.out)
[ "$losses" -ge 2 ] || { echo "  !!! relink saw $losses transport losses for 2 deletes"; rc=1; }
NOTE="2 ranks on rxe0/rxe1, $losses transport losses"
endstep $rc
fi

############################################################################
# The kernel's NVMe-oF on the same rxe pair and faults (tests/vm/guest/nvmeof.sh).
if want nvmeof; then
  . /vm/nvmeof.sh
fi

############################################################################
step final devices_and_kernel_log
rc=0
for d in rxe0 rxe1; do [ -d /sys/class/infiniband/$d ] || { echo "  !!! $d is gone at the end"; rc=1; }; done
if [ -n "${VM_NETEM_LOSS:-}" ]; then
  for p in veth0p veth1p; do
    echo "  netem on $p: $(tc -s qdisc show dev $p | grep Sent)"
  done
  NOTE="netem loss ${VM_NETEM_LOSS}%: $(tc -s qdisc show | awk '/netem/{q=1} q && /Sent/{gsub(/[(,]/,""); s+=$4; d+=$7; q=0} END{printf "%d of %d packets dropped", d, s+d}')"
fi
dmesg | grep -E 'BUG:|Oops|general protection|blocked for more than|Call Trace|WARNING:' > /tmp/klog
if [ -s /tmp/klog ]; then
  echo "  kernel log (with the stacks):"
  dmesg | grep -A24 -E 'BUG:|Oops|general protection|blocked for more than|WARNING:' | head -150 | sed 's/^/  | /' 
  grep -qE 'BUG:|Oops|general protection|blocked for more than' /tmp/klog && rc=1
  NOTE=$(awk '/blocked for more than/ {for (i = 1; i < NF; i++) if ($i == "task" && !h[$(i+1)]++) printf "hung task %s; ", $(i+1)}
              /WARNING:/ && !w[$NF]++ {sub(/.* at /, ""); printf "WARNING at %s; ", $1}
              /BUG:|Oops|general protection/ && !b++ {printf "%s; ", $0}' /tmp/klog)
  NOTE="kernel log: ${NOTE%; }"
fi
endstep $rc

echo
echo "=== SUMMARY kernel=$KV expect_backend=${EXPECT:-none} failed_steps=$FAILS"
printf '%-9s %-42s %-5s %8s  %s\n' GROUP STEP RESULT DUR NOTE
while IFS='|' read -r g s r d n; do printf '%-9s %-42s %-5s %7ss  %s\n' "$g" "$s" "$r" "$d" "$n"; done < /tmp/results
while IFS='|' read -r g s r d n; do echo "RELINK_VM_RESULT|$KV|$g|$s|$r|$d|$n"; done < /tmp/results
exit $FAILS
