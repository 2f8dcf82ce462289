# The anchor, measured: the kernel's NVMe-oF (nvmet with an rdma port,
# nvme-rdma connected through /dev/nvme-fabrics) on the same rxe pair and
# the same faults as relinkd's group — `rdma link delete` of the target's
# device, then of the initiator's, during a direct-I/O write — recording
# what the kernel does: the I/O's end (dd's status, how long it took), the
# controller's states, its reconnects and I/O errors in the kernel log, and
# the time from the device's return to the controller serving again. Then
# both sides' throughput on the same rxe. Sourced by run.sh (its helpers:
# step, endstep, ts, dt, wait_for, x, tx); the steps pass when the
# measurement ran, whatever the kernel did (that is the result, in NOTE).

NQN=relink-anchor
CFS=/sys/kernel/config/nvmet
IMG=/tmp/nvmeof.img
NVME_MIB=160

nvme_dev() { # the namespace's block device (the multipath head, not a path's nvmeXcYnZ), once there
  for b in /dev/nvme*n1; do
    case ${b##*/} in *c*n*) continue ;; esac
    [ -b "$b" ] && { echo "$b"; return 0; }
  done
  return 1
}
nvme_ctrl() { for c in /sys/class/nvme/nvme*; do [ -e "$c/subsysnqn" ] && grep -qx "$NQN" "$c/subsysnqn" && { echo "$c"; return 0; }; done; return 1; }
klog_since() { # klog_since T: kernel log lines after uptime T about nvme
  dmesg | awk -v t="$1" '{ s=$0; sub(/^\[ */, "", s); split(s, a, "]"); if (a[1] + 0 > t) print }' | grep -i nvme
}

step nvmeof setup
rc=0
# Stalled I/O is the measurement here: the kernel's hung-task report waits
# longer than the controller may take to give up (ctrl_loss_tmo below).
echo 120 > /proc/sys/kernel/hung_task_timeout_secs 2>/dev/null
mount | grep -q ' /sys/kernel/config ' || mount -t configfs configfs /sys/kernel/config || rc=1
dd if=/dev/zero of=$IMG bs=1M count=0 seek=$NVME_MIB 2>/dev/null || rc=1
if [ $rc = 0 ] && [ -d $CFS ]; then
  mkdir $CFS/subsystems/$NQN && echo 1 > $CFS/subsystems/$NQN/attr_allow_any_host || rc=1
  # Buffered I/O on the file: tmpfs takes no O_DIRECT before 6.6.
  mkdir $CFS/subsystems/$NQN/namespaces/1 && echo -n $IMG > $CFS/subsystems/$NQN/namespaces/1/device_path &&
    echo 1 > $CFS/subsystems/$NQN/namespaces/1/buffered_io &&
    echo 1 > $CFS/subsystems/$NQN/namespaces/1/enable || rc=1
  mkdir $CFS/ports/1 && echo rdma > $CFS/ports/1/addr_trtype && echo ipv4 > $CFS/ports/1/addr_adrfam &&
    echo 10.10.0.2 > $CFS/ports/1/addr_traddr && echo 4420 > $CFS/ports/1/addr_trsvcid &&
    ln -s $CFS/subsystems/$NQN $CFS/ports/1/subsystems/$NQN || rc=1
  # reconnect every second, give up after 10 s (the default is 600 s).
  echo "transport=rdma,traddr=10.10.0.2,trsvcid=4420,nqn=$NQN,host_traddr=10.10.0.1,reconnect_delay=1,ctrl_loss_tmo=10" \
    > /dev/nvme-fabrics || rc=1
  wait_for 20 nvme_dev || { echo "  no namespace device after 20 s"; rc=1; }
else
  echo "  no nvmet configfs ($CFS): nvmet not loaded?"; rc=1
fi
DEV=$(nvme_dev); CTRL=$(nvme_ctrl)
echo "  namespace $DEV, controller $CTRL state $(cat $CTRL/state 2>/dev/null), transport $(cat $CTRL/transport 2>/dev/null)"
NOTE="nvme-rdma to nvmet over rxe0->rxe1: $DEV ($NVME_MIB MiB file namespace)"
endstep $rc

# One fault: a 96 MiB direct write in 64 KiB blocks (about 2 s on this
# rxe); 0.5 s in, `rdma link delete $1`; 2 s later `rdma link add $1 ...
# netdev $2`. Records dd's status and time, the controller's states
# (sampled every 0.1 s until it is live again or gone, at most 45 s after
# the add), the kernel's nvme lines, the time from the add to the first
# state "live" again, and whether the namespace's file holds the bytes.
nvmeof_fault() {
  dev=$1 netdev=$2
  t0=$(ts)
  dd if=/dev/urandom of=/tmp/nvmeof.part bs=1M count=8 2>/dev/null
  for i in 1 2 3 4 5 6 7 8 9 10 11 12; do cat /tmp/nvmeof.part; done > /tmp/nvmeof.src
  rm -f /tmp/nvmeof.part /tmp/nvmeof.stop
  : > /tmp/nvmeof.states
  ( while [ ! -e /tmp/nvmeof.stop ]; do echo "$(ts) $(cat $CTRL/state 2>/dev/null || echo gone)" >> /tmp/nvmeof.states; sleep 0.1; done ) &
  sampler=$!
  [ -b "$DEV" ] || { echo "  $DEV is not a block device"; return 1; }
  ( t_=$(ts); dd if=/tmp/nvmeof.src of=$DEV bs=64k oflag=direct 2>/tmp/nvmeof.dd; echo "$? $(dt "$t_" "$(ts)")" > /tmp/nvmeof.ddrc ) &
  ddpid=$!
  sleep 0.5
  tx rdma link delete $dev; del_rc=$?
  sleep 2
  tadd=$(ts); tx rdma link add $dev type rxe netdev $netdev; add_rc=$?
  policy_routes veth0 veth1
  wait_for 60 gone $ddpid || { echo "  dd still running 60 s after the add"; kill $ddpid; }
  wait_for 45 sh -c "tail -1 /tmp/nvmeof.states | grep -qE ' (live|gone)\$'"
  touch /tmp/nvmeof.stop; wait $sampler 2>/dev/null
  read -r ddrc ddsecs < /tmp/nvmeof.ddrc 2>/dev/null || { ddrc=killed; ddsecs=-; }
  live=$(awk -v a="$tadd" '$1 > a && $2 == "live" {print $1; exit}' /tmp/nvmeof.states)
  states=$(awk '{print $2}' /tmp/nvmeof.states | uniq | tr '\n' ' ')
  klog_since "$t0" > /tmp/nvmeof.klog
  ioerr=$(grep -ciE 'failing I/O|I/O error|blk_update_request|critical .*error|Buffer I/O' /tmp/nvmeof.klog)
  requeued=$(grep -ci 'requeuing I/O' /tmp/nvmeof.klog)
  rejected=$(grep -ci 'Connect rejected' /tmp/nvmeof.klog)
  attempts=$(grep -ci 'Reconnecting in' /tmp/nvmeof.klog)
  removed=$(grep -ciE 'Removing ctrl|removing controller|deleting controller' /tmp/nvmeof.klog)
  grep -v 'Connect rejected' /tmp/nvmeof.klog | sed 's/^/  klog| /' | head -30
  [ "$rejected" -gt 0 ] && echo "  klog| ... and $rejected x 'Connect rejected' ($(grep -m1 'Connect rejected' /tmp/nvmeof.klog | sed 's/.*rejected: //'))"
  sed 's/^/  dd| /' /tmp/nvmeof.dd
  same=no
  [ "$(md5sum < /tmp/nvmeof.src | cut -c1-32)" = "$(head -c $((96 << 20)) $IMG | md5sum | cut -c1-32)" ] && same=yes
  rm -f /tmp/nvmeof.src
  NOTE="delete rc $del_rc, add rc $add_rc; dd exit $ddrc after ${ddsecs}s; controller: $states; live again $( [ -n "$live" ] && echo "$(dt "$tadd" "$live") s" || echo never) after the add; kernel: $attempts reconnect delays, $rejected connects rejected, $removed controller removals, $requeued I/O requeued, $ioerr I/O failed lines; the file holds the 96 MiB written: $same"
  echo "  RESULT nvmeof kernel=$KV fault=$dev: $NOTE"
  [ "$del_rc" = 0 ] && [ "$add_rc" = 0 ]
}

# The target's port as an administrator brings it back after its device
# went (the listener dies with the device: nvmet does not listen again by
# itself): the port taken down and set up again.
nvmeof_port_again() {
  rm -f $CFS/ports/1/subsystems/$NQN; rmdir $CFS/ports/1 2>/dev/null
  mkdir $CFS/ports/1 && echo rdma > $CFS/ports/1/addr_trtype && echo ipv4 > $CFS/ports/1/addr_adrfam &&
    echo 10.10.0.2 > $CFS/ports/1/addr_traddr && echo 4420 > $CFS/ports/1/addr_trsvcid &&
    ln -s $CFS/subsystems/$NQN $CFS/ports/1/subsystems/$NQN
}

nvmeof_connect() { # a controller live again (connect if none), its namespace in DEV
  CTRL=$(nvme_ctrl) && [ "$(cat $CTRL/state 2>/dev/null)" = live ] && { DEV=$(nvme_dev); return 0; }
  echo "transport=rdma,traddr=10.10.0.2,trsvcid=4420,nqn=$NQN,host_traddr=10.10.0.1,reconnect_delay=1,ctrl_loss_tmo=10" \
    > /dev/nvme-fabrics 2>/dev/null
  wait_for 30 nvme_dev && DEV=$(nvme_dev) && CTRL=$(nvme_ctrl)
}

if [ -n "$DEV" ]; then
  step nvmeof target_device_delete
  nvmeof_fault rxe1 veth1; endstep $?
  # What an administrator does then: the port set up again, the host
  # connected again (its controller was deleted at ctrl_loss_tmo).
  step nvmeof admin_brings_it_back
  t_=$(ts); rc=0
  nvmeof_port_again || rc=1
  nvmeof_connect || rc=1
  NOTE="port set up again and host connected: $(dt "$t_" "$(ts)") s; controller $(cat $CTRL/state 2>/dev/null)"
  endstep $rc
  step nvmeof initiator_device_delete
  if [ -n "$DEV" ]; then nvmeof_fault rxe0 veth0; endstep $?; else NOTE="no controller to test"; endstep 1; fi
  nvmeof_connect || nvmeof_port_again && nvmeof_connect

  step nvmeof throughput
  rc=0
  [ -b "$DEV" ] || rc=1
  t_=$(ts); dd if=/dev/zero of=$DEV bs=1M count=64 oflag=direct 2>/dev/null || rc=1; w=$(dt "$t_" "$(ts)")
  t_=$(ts); dd if=$DEV of=/dev/null bs=1M count=64 iflag=direct 2>/dev/null || rc=1; r=$(dt "$t_" "$(ts)")
  NOTE="dd of 64 MiB direct, 1 MiB blocks: write $(awk -v s="$w" 'BEGIN{printf "%.1f", 64/s}') MiB/s, read $(awk -v s="$r" 'BEGIN{printf "%.1f", 64/s}') MiB/s"
  # With qemu-img (packed for the relinkd group): relinkd's nbd_throughput
  # parameters, O_DIRECT on the namespace (`-t none`).
  if command -v qemu-img > /dev/null; then
    qbs() { o_=$(timeout 120 qemu-img bench -f raw -t none "$@" $DEV 2>&1) &&
      echo "$o_" | sed -n 's/^Run completed in \([0-9.]*\) seconds.*/\1/p'; }
    ws=$(qbs -w -c 64 -d 16 -s 1M) && rs=$(qbs -c 2000 -d 16 -s 4K -S $((7919 * 4096))) &&
      NOTE="$NOTE; qemu-img bench (relinkd's parameters): $(awk -v ws="$ws" -v rs="$rs" 'BEGIN{printf "%.1f MiB/s of 1 MiB writes, %.0f 4 KiB reads/s", 64 / ws, 2000 / rs}')" ||
      { echo "  qemu-img bench on $DEV failed: $o_"; rc=1; }
  fi
  echo "  RESULT nvmeof_throughput kernel=$KV: $NOTE"
  endstep $rc
fi

# Leave nothing behind for later groups.
for c in /sys/class/nvme/nvme*; do [ -e "$c/delete_controller" ] && echo 1 > "$c/delete_controller" 2>/dev/null; done
rm -f $CFS/ports/1/subsystems/$NQN 2>/dev/null; rmdir $CFS/ports/1 2>/dev/null
echo 0 > $CFS/subsystems/$NQN/namespaces/1/enable 2>/dev/null
rmdir $CFS/subsystems/$NQN/namespaces/1 $CFS/subsystems/$NQN 2>/dev/null
rm -f $IMG /tmp/nvmeof.src
echo 20 > /proc/sys/kernel/hung_task_timeout_secs 2>/dev/null
