# Sourced by scripts/test.sh and tests/vm/run.sh: the shell side of
# crates/relink-skip, so a tier run by a script reports its skips exactly
# as a Rust test does.
#
#   skip_report SCOPE BINARY LABEL REASON [MISSING]
#
# SCOPE is `test` (the whole item did not run) or `part`; MISSING names
# what the install step (scripts/deps.sh) provides and this machine lacks,
# empty for a skip of the machine's own kind. Prints `SKIPPED: LABEL:
# REASON` and appends the record to $RELINK_SKIP_LOG (when set), in
# relink-skip's format (scope, binary, label, reason, missing; tab-separated).
# Prints FAILED instead and returns 1 under CI=true when MISSING is set, and
# for every skip under RELINK_FAIL_ON_SKIP=1.

skip_ci() { case ${CI:-} in true|TRUE|True|1) return 0 ;; esac; return 1; }

skip_report() {
  local scope=$1 bin=$2 label=$3 reason=$4 missing=${5:-} part=
  if [ -n "$missing" ] && skip_ci; then
    echo "FAILED: $label: would be SKIPPED ($reason), but CI=true and $missing is missing: CI's install step (scripts/deps.sh) should have provided it"
    return 1
  fi
  if [ "${RELINK_FAIL_ON_SKIP:-}" = 1 ]; then
    echo "FAILED: $label: would be SKIPPED ($reason), but RELINK_FAIL_ON_SKIP=1: every skip fails"
    return 1
  fi
  [ "$scope" = part ] && part=' (part)'
  echo "SKIPPED$part: $label: $reason"
  if [ -n "${RELINK_SKIP_LOG:-}" ]; then
    printf '%s\t%s\t%s\t%s\t%s\n' "$scope" "$bin" "$label" "$reason" "$missing" | tr -d '\r' >> "$RELINK_SKIP_LOG"
  fi
  return 0
}
