#!/usr/bin/env bash
# The project's test command (README). Installs what the host tiers need
# (scripts/deps.sh tests), runs every tier, and ends with a table of what
# was skipped and why, the list of what failed, and one line:
#
#   N passed, M failed, K skipped
#
# Host tests count one by one, bench targets one by one, fuzz targets one
# by one, the soak as one, VM tier steps one by one. A test that reports a skip through relink-skip (crates/relink-skip)
# counts as skipped, not passed; a part of a test or bench that could not
# run counts as one more skipped item. Exits 0 only when nothing failed.
# docs/TESTING.md lists the tiers, what each needs and how a skip shows.
#
#   scripts/test.sh [TIER...]    host, bench, fuzz, soak, vm (default: all five, in that order)
#
#   RELINK_SIM_SEEDS=N     seeds of the randomized simulation (default 2000)
#   RELINK_SKIP_VM=1       leave out the VM tier (counted as one skip)
#   RELINK_FUZZ_SECONDS=N  seconds per fuzz target (default 20; scripts/fuzz.sh)
#   RELINK_SOAK_SECONDS=N  seconds of the soak (default 300: `relink soak`)
#   CI=true                a skip for want of something the install step
#                          provides fails instead (a missing install step)
#   RELINK_FAIL_ON_SKIP=1  every skip fails
#
# Each tier's output is also kept in target/test-report/ (with skips.tsv).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# shellcheck source=scripts/skip.sh
. "$ROOT/scripts/skip.sh"

TIERS=("$@")
[ ${#TIERS[@]} = 0 ] && TIERS=(host bench fuzz soak vm)
for t in "${TIERS[@]}"; do
  case $t in host|bench|fuzz|soak|vm) ;; *) echo "test.sh: unknown tier '$t' (host, bench, fuzz, soak, vm)" >&2; exit 2 ;; esac
done
wants() { case " ${TIERS[*]} " in *" $1 "*) return 0 ;; esac; return 1; }

REPORT=$ROOT/target/test-report
mkdir -p "$REPORT"
export RELINK_SKIP_LOG=$REPORT/skips.tsv
: > "$RELINK_SKIP_LOG"
PASSED=0
FAILED=0
FAILURES=()
T0=$(date +%s)
TIMES=()

step() { printf '\n==> %s\n' "$*"; }
skips_now() { wc -l < "$RELINK_SKIP_LOG"; }
fail() { FAILED=$((FAILED + 1)); FAILURES+=("$1"); }
timed() { TIMES+=("$1 $(( $(date +%s) - $2 ))s"); }

# run_libtest LOG CMD...: a cargo test command; counts its tests from
# libtest's summaries, less those that reported a whole-test skip
run_libtest() {
  local log=$1 before rc counts p f whole name
  shift
  before=$(skips_now)
  "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  counts=$(awk '/^test result:/ { for (k = 2; k <= NF; k++) {
      if ($k ~ /^passed/) p += $(k-1); if ($k ~ /^failed/) f += $(k-1) } }
    END { print p+0, f+0 }' "$log")
  read -r p f <<< "$counts"
  whole=$(awk -F'\t' -v from="$before" 'NR > from && $1 == "test"' "$RELINK_SKIP_LOG" | wc -l)
  PASSED=$((PASSED + (p > whole ? p - whole : 0)))
  # the names libtest lists under its last "failures:" before each FAILED summary
  while IFS= read -r name; do fail "$name"; done < <(awk '
    /^ +Running / { bin = $0; sub(/.*\(/, "", bin); sub(/\).*/, "", bin); sub(/.*\//, "", bin); sub(/-[0-9a-f]+$/, "", bin) }
    /^ +Doc-tests / { bin = "doc-tests " $2 }
    /^---- .* stdout ----$/ { cur = $2; want = 0 }
    want && cur != "" && !(cur in why) { why[cur] = substr($0, 1, 400); want = 0 }
    /^thread .* panicked at / { want = 1 }
    /^failures:$/ { c = 0 }
    /^    [^ ]+$/ { names[++c] = $1 }
    /^test result: FAILED/ { for (k = 1; k <= c; k++) print bin ": " names[k] (names[k] in why ? ": " why[names[k]] : ""); c = 0 }' "$log")
  if [ "$rc" != 0 ] && [ "$f" = 0 ]; then
    fail "'$*' exited $rc without a failed test (a build error?); see $log"
  fi
  # tests marked #[ignore]: not run, so skipped
  while IFS= read -r name; do
    skip_report part "$(basename "$log" .log)" "$name" "marked #[ignore] (run it with --ignored)" || fail "$name: ignored"
  done < <(grep -aoE '^test [^ ]+ \.\.\. ignored' "$log" | awk '{print $2}')
}

# run_bench LOG CMD...: a cargo bench command; each bench target one item
run_bench() {
  local log=$1 rc n bad
  shift
  "$@" --no-fail-fast 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  n=$(grep -acE '^ +Running benches/' "$log")
  # cargo names each failed target as `-p CRATE --bench NAME`
  bad=$(grep -aoE '`-p [^`]* --bench [^`]*`' "$log" | sort -u)
  if [ -n "$bad" ]; then
    while IFS= read -r b; do fail "bench ${b//\`/}"; done <<< "$bad"
    n=$((n - $(wc -l <<< "$bad")))
  elif [ "$rc" != 0 ]; then
    fail "'$*' exited $rc (a build error?); see $log"
  fi
  PASSED=$((PASSED + (n > 0 ? n : 0)))
}

step "packages (scripts/deps.sh tests)"
t=$(date +%s)
"$ROOT/scripts/deps.sh" tests || fail "scripts/deps.sh tests: packages missing (CI=true)"
timed packages "$t"

if wants host; then
  step "mpi4py's test suite, built against Open MPI (scripts/mpi4py.sh; cached in target/mpi4py)"
  t=$(date +%s)
  if RELINK_MPI4PY=$("$ROOT/scripts/mpi4py.sh"); then
    export RELINK_MPI4PY
  else
    echo "mpi4py could not be prepared: relink-ofi's mpi4py test reports a skip (a failure under CI)"
  fi
  timed mpi4py "$t"
  step "host tier: unit, property, conformance (soft in-process + TCP), simulation, multi-process, NBD client and C API tests"
  t=$(date +%s)
  run_libtest "$REPORT/host.log" cargo test --workspace --release --no-fail-fast
  timed host "$t"
fi

if wants bench; then
  step "bench tier: the benchmarks still run (quick mode; figures come from the full runs in docs/BENCHMARKS.md)"
  t=$(date +%s)
  run_bench "$REPORT/bench-relink-bench.log" env RELINK_BENCH_QUICK=1 cargo bench -p relink-bench
  run_bench "$REPORT/bench-c.log" env RELINK_BENCH_QUICK=1 cargo bench -p relink-c --bench c_vs_rust
  run_bench "$REPORT/bench-nbd.log" env RELINK_BENCH_QUICK=1 cargo bench -p relinkd --bench nbd
  run_bench "$REPORT/bench-ofi.log" env RELINK_BENCH_QUICK=1 cargo bench -p relink-ofi --bench ofi
  timed bench "$t"
fi

if wants fuzz; then
  step "fuzz tier: every cargo-fuzz target for ${RELINK_FUZZ_SECONDS:-20} s from the kept corpus (scripts/fuzz.sh; nightly, AddressSanitizer)"
  t=$(date +%s)
  FRES=$REPORT/fuzz-results.txt
  RELINK_FUZZ_RESULTS=$FRES "$ROOT/scripts/fuzz.sh" 2>&1 | tee "$REPORT/fuzz.log"
  rc=${PIPESTATUS[0]}
  fpass=0
  if [ -f "$FRES" ]; then
    fpass=$(awk -F'|' '$2 == "PASS"' "$FRES" | wc -l)
    while IFS='|' read -r name _ note; do fail "fuzz $name: $note"; done < <(awk -F'|' '$2 == "FAIL"' "$FRES")
  fi
  PASSED=$((PASSED + fpass))
  if [ "$rc" != 0 ] && ! grep -q '|FAIL|' "$FRES" 2>/dev/null; then
    fail "scripts/fuzz.sh exited $rc (see $REPORT/fuzz.log)"
  fi
  timed fuzz "$t"
fi

if wants soak; then
  SOAK_SECONDS=${RELINK_SOAK_SECONDS:-300}
  step "soak tier: relink soak for $SOAK_SECONDS s (the checked workload through seeded device faults on the soft TCP fabric; docs/benchmarks/soak.md)"
  t=$(date +%s)
  if cargo build --release -p relink-cli 2>&1 | tee "$REPORT/soak-build.log"; [ "${PIPESTATUS[0]}" = 0 ]; then
    "$ROOT/target/release/relink" soak --duration "$SOAK_SECONDS" --json-out "$REPORT/soak.json" 2>&1 | tee "$REPORT/soak.log"
    if [ "${PIPESTATUS[0]}" = 0 ]; then
      PASSED=$((PASSED + 1))
    else
      fail "soak: $(grep -a '^relink: error:' "$REPORT/soak.log" | tail -1 || true) (see $REPORT/soak.log)"
    fi
  else
    fail "soak: cargo build --release -p relink-cli failed (see $REPORT/soak-build.log)"
  fi
  timed soak "$t"
fi

if wants vm; then
  step "VM tier: real RDMA (rdma-core on Soft-RoCE in a VM: tests/vm/run.sh)"
  t=$(date +%s)
  RESULTS=$ROOT/target/vm/out/results.txt
  rm -f "$RESULTS"
  if [ "${RELINK_SKIP_VM:-0}" = 1 ]; then
    skip_report test vm "VM tier" "RELINK_SKIP_VM=1 is set; nothing of the real-RDMA tier ran" || fail "VM tier: skipped"
  else
    # exits 0 only when every step passed, or (reporting the skip) when the
    # tier cannot run on this machine at all
    "$ROOT/tests/vm/run.sh"
    rc=$?
    vpass=0; vfail=0
    if [ -f "$RESULTS" ]; then
      vpass=$(awk -F'|' '$4 == "PASS"' "$RESULTS" | wc -l)
      while IFS='|' read -r kv g st _; do fail "vm $kv: $g/$st"; vfail=$((vfail + 1)); done \
        < <(awk -F'|' '$4 == "FAIL"' "$RESULTS")
    fi
    PASSED=$((PASSED + vpass))
    [ "$rc" != 0 ] && [ "$vfail" = 0 ] && fail "tests/vm/run.sh exited $rc (see its output above)"
  fi
  timed vm "$t"
fi

# --- summary ------------------------------------------------------------------
SKIPPED=$(skips_now)
echo
echo "==================== scripts/test.sh summary ===================="
echo "tiers: ${TIERS[*]}; time: ${TIMES[*]}, total $(( $(date +%s) - T0 ))s; logs: $REPORT/"
if [ "$SKIPPED" != 0 ]; then
  echo
  echo "skipped ($SKIPPED):"
  awk -F'\t' '{ printf "  %-22s %-60s %s%s\n", $2, $3 ($1 == "part" ? " (part)" : ""), $4, ($5 != "" ? "  [missing: " $5 "]" : "") }' "$RELINK_SKIP_LOG"
fi
if [ "$FAILED" != 0 ]; then
  echo
  echo "failed ($FAILED):"
  printf '  %s\n' "${FAILURES[@]}"
fi
echo
echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
[ "$FAILED" = 0 ]
