#!/usr/bin/env bash
# The fuzz tier: every cargo-fuzz target of fuzz/ for a bounded time, from
# the corpus the project keeps (fuzz/corpus/<target>, read only), with new
# inputs into target/fuzz/corpus/<target>. libFuzzer with AddressSanitizer
# on the nightly toolchain (cargo +nightly fuzz). A crash, a leak, a
# timeout or an out-of-memory fails the target; its input is left in
# fuzz/artifacts/<target>/ (as cargo-fuzz does), named in the output with
# the command that replays it and the copy that keeps it as a regression
# test (fuzz/regressions/<target>/, replayed on stable by
# `cargo test -p relink-fuzz`; see fuzz/regressions/README.md).
#
#   scripts/fuzz.sh [--seconds N] [--keep] [TARGET...]   (default: every target)
#
#   --keep  copy each failing input to fuzz/regressions/<target>/ too
#
#   RELINK_FUZZ_SECONDS  seconds per target (default 20)
#   RELINK_FUZZ_RESULTS  a file that gets one "target|PASS/FAIL|note" line
#                        per target (scripts/test.sh counts them)
#
# Exits 0 when every target ran clean. Without a nightly toolchain the
# tier reports a skip (scripts/skip.sh) and exits 0; cargo-fuzz it installs
# itself (cargo install cargo-fuzz --locked).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# shellcheck source=scripts/skip.sh
. "$ROOT/scripts/skip.sh"
SECS=${RELINK_FUZZ_SECONDS:-20}
KEEP=0
TARGETS=()
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) SECS=$2; shift 2 ;;
    --seconds=*) SECS=${1#*=}; shift ;;
    --keep) KEEP=1; shift ;;
    -h|--help) awk 'NR>1 && /^#/{sub(/^# ?/,"");print;next} NR>1{exit}' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) TARGETS+=("$1"); shift ;;
  esac
done
case $SECS in ''|*[!0-9]*) echo "fuzz.sh: --seconds $SECS: a whole number of seconds is expected" >&2; exit 2 ;; esac
RESULTS=${RELINK_FUZZ_RESULTS:-}
[ -n "$RESULTS" ] && : > "$RESULTS"

if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  skip_report test fuzz "fuzz tier" "no nightly toolchain (cargo-fuzz needs it: rustup toolchain install nightly)"
  exit 0
fi
if ! command -v cargo-fuzz >/dev/null; then
  echo "fuzz.sh: installing cargo-fuzz (cargo install cargo-fuzz --locked)"
  cargo install cargo-fuzz --locked || { echo "FAILED: fuzz tier: cargo install cargo-fuzz failed"; exit 1; }
fi
ALL=$(cargo +nightly fuzz list) || { echo "FAILED: fuzz tier: cargo fuzz list failed"; exit 1; }
[ ${#TARGETS[@]} = 0 ] && read -r -a TARGETS <<< "$(echo $ALL)"
for t in "${TARGETS[@]}"; do
  grep -qx "$t" <<< "$ALL" || { echo "fuzz.sh: no target $t (cargo fuzz list: $(echo $ALL))" >&2; exit 2; }
done

echo "fuzz.sh: building ${#TARGETS[@]} targets (cargo +nightly fuzz build -O, AddressSanitizer)"
t0=$(date +%s)
if ! cargo +nightly fuzz build -O; then
  echo "FAILED: fuzz tier: the targets did not build"
  for t in "${TARGETS[@]}"; do [ -n "$RESULTS" ] && echo "$t|FAIL|did not build" >> "$RESULTS"; done
  exit 1
fi
echo "fuzz.sh: built in $(( $(date +%s) - t0 ))s; ${SECS}s per target"

FAILS=0
for t in "${TARGETS[@]}"; do
  seeds=$ROOT/fuzz/corpus/$t
  work=$ROOT/target/fuzz/corpus/$t
  mkdir -p "$seeds" "$work"
  log=$ROOT/target/fuzz/$t.log
  n0=$(ls "$seeds" | wc -l)
  cargo +nightly fuzz run -O "$t" "$work" "$seeds" -- \
    -max_total_time="$SECS" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 > "$log" 2>&1
  rc=$?
  execs=$(awk '/stat::number_of_executed_units:/{print $2}' "$log" | tail -1)
  cov=$(grep -aoE 'cov: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
  corpus=$(ls "$work" | wc -l)
  note="${execs:-?} runs, coverage ${cov:-?} edges, corpus $n0 kept + $corpus new"
  if [ "$rc" = 0 ]; then
    echo "fuzz $t: PASS ($note)"
    [ -n "$RESULTS" ] && echo "$t|PASS|$note" >> "$RESULTS"
  else
    FAILS=$((FAILS + 1))
    art=$(grep -aoE 'Test unit written to [^ ]+' "$log" | tail -1 | cut -d' ' -f5)
    echo "FAILED: fuzz $t (rc $rc; $note); the end of its log ($log):"
    grep -aE 'ERROR|panicked|SUMMARY|Test unit written' "$log" | head -10 | sed 's/^/  | /'
    tail -20 "$log" | sed 's/^/  | /'
    if [ -n "$art" ]; then
      echo "  replay: cargo +nightly fuzz run -O $t $art"
      if [ "$KEEP" = 1 ] && mkdir -p "$ROOT/fuzz/regressions/$t" && cp "$art" "$ROOT/fuzz/regressions/$t/"; then
        echo "  kept: fuzz/regressions/$t/$(basename "$art") (cargo test -p relink-fuzz replays it)"
      else
        echo "  keep it as a regression test: cp $art fuzz/regressions/$t/ (cargo test -p relink-fuzz replays it)"
      fi
    fi
    [ -n "$RESULTS" ] && echo "$t|FAIL|rc $rc${art:+, input $art}" >> "$RESULTS"
  fi
done
echo "fuzz.sh: ${#TARGETS[@]} targets, $FAILS failed, $(( $(date +%s) - t0 ))s"
[ "$FAILS" = 0 ]
