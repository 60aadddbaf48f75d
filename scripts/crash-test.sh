#!/bin/sh
# Crash consistency, shown (docs/crash-consistency.md): SIGKILL the real
# `hearth` at random instants while it writes each of its stores (the MT-Bench
# tape, judgments from `eval judge` and `eval grade`, the Telegram bot's redb
# state, the model cache via `hearth pull`, `hearth quantize`'s output, the
# prompt states of `hearth serve --cache-dir`), restart
# it, and check that nothing committed is lost or damaged. Prints one result
# line per store.
#
#   scripts/crash-test.sh [KILLS_PER_STORE] [SEED]
#
# KILLS_PER_STORE defaults to 50 (what the normal test suite runs); SEED
# replays the kill instants of an earlier run (each run prints its seed).
set -eu
cd "$(dirname "$0")/.."
HEARTH_CRASH_KILLS=${1:-50}
export HEARTH_CRASH_KILLS
if [ -n "${2:-}" ]; then
    HEARTH_CRASH_SEED=$2
    export HEARTH_CRASH_SEED
fi
HEARTH_CRASH_REPORT=$(mktemp "${TMPDIR:-/tmp}/hearth-crash.XXXXXX")
export HEARTH_CRASH_REPORT
trap 'rm -f "$HEARTH_CRASH_REPORT"' EXIT INT TERM
status=0
cargo test --profile ci -p hearth-cli --test it -- --nocapture crash_kill:: crash_prompt_cache:: >&2 || status=1
echo "kills per store: $HEARTH_CRASH_KILLS"
sort "$HEARTH_CRASH_REPORT"
exit $status
