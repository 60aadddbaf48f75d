#!/bin/sh
# The whole test suite: fetches the real model once (cached), then runs every
# crate's unit, property and end-to-end tests in release mode, and closes with
# one line totalling what ran.
set -eu
cd "$(dirname "$0")/.."
HEARTH_MODEL=$(sh scripts/fetch-model.sh)
export HEARTH_MODEL
log=$(mktemp "${TMPDIR:-/tmp}/hearth-test.XXXXXX")
trap 'rm -f "$log"' EXIT INT TERM
status=0
cargo test --workspace --profile ci --no-fail-fast 2>&1 | tee "$log" || status=1
# cargo's exit status is lost in the pipe; a failed test shows in its summary.
grep -q '^test result: FAILED' "$log" && status=1
grep -q '^error' "$log" && status=1
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i) ~ /^passed;?$/) p += $(i-1); if ($(i) ~ /^failed;?$/) f += $(i-1); if ($(i) ~ /^ignored;?$/) s += $(i-1) } }
     END { printf "all crates: %d passed, %d failed, %d skipped\n", p, f, s }' "$log"
exit $status
