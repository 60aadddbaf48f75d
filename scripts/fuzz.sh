#!/usr/bin/env bash
# Run Hearth's fuzz targets (fuzz/fuzz_targets) one at a time and print what
# each did: executions, CPU time, crashes, timeouts, out-of-memory runs and
# the corpus size. See docs/fuzz.md.
#
#   scripts/fuzz.sh                  # every target, FUZZ_SECONDS (default 120) each
#   scripts/fuzz.sh TARGET           # one target, 120 s
#   scripts/fuzz.sh TARGET SECONDS   # one target, SECONDS
#   scripts/fuzz.sh all SECONDS      # every target, SECONDS each
#   scripts/fuzz.sh --list           # the targets
#
# One libFuzzer process, one core (no -jobs/-fork). Each run starts from the
# committed seeds (fuzz/seeds/TARGET, copied into the working corpus
# fuzz/corpus/TARGET, gitignored) and the target's dictionary
# (fuzz/dict/TARGET.dict) when it has one. A run that takes more than
# -timeout seconds or more than -rss_limit_mb of memory is a failure like a
# panic; failing inputs land in fuzz/artifacts/TARGET/, the run's log in
# fuzz/artifacts/logs/TARGET.log.
#
# Environment:
#   FUZZ_SECONDS     default time per target (120)
#   FUZZ_TIMEOUT     libFuzzer -timeout, seconds per input (10)
#   FUZZ_RSS_MB      libFuzzer -rss_limit_mb (2048; -malloc_limit_mb follows it)
#   FUZZ_SANITIZER   cargo fuzz -s: none (default, fastest) or address
#   FUZZ_ARGS        extra libFuzzer flags (e.g. "-max_len=65536")
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`); runs on a stable toolchain
# with RUSTC_BOOTSTRAP=1 (cargo-fuzz passes nightly-only flags to rustc).
# Exits 1 when any target failed.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
fuzz="$root/fuzz"
cd "$fuzz"

targets() {
    sed -n 's/^name = "\([a-z0-9_]*\)"$/\1/p' Cargo.toml | grep -v '^hearth-fuzz$' | grep -v '^hearth_fuzz$'
}

if [[ "${1:-}" == "--list" ]]; then
    targets
    exit 0
fi

seconds="${2:-${FUZZ_SECONDS:-120}}"
timeout="${FUZZ_TIMEOUT:-10}"
rss="${FUZZ_RSS_MB:-2048}"
sanitizer="${FUZZ_SANITIZER:-none}"
if [[ -z "${1:-}" || "${1:-}" == "all" ]]; then
    mapfile -t run < <(targets)
else
    if ! targets | grep -qx "$1"; then
        echo "unknown target '$1'; scripts/fuzz.sh --list names them" >&2
        exit 2
    fi
    run=("$1")
fi

export RUSTC_BOOTSTRAP=1
echo "building ${#run[@]} target(s) (sanitizer: $sanitizer)..."
if [[ ${#run[@]} -eq 1 ]]; then
    cargo fuzz build -s "$sanitizer" "${run[0]}" || exit 1
else
    cargo fuzz build -s "$sanitizer" || exit 1
fi

count() { # artifacts of one kind
    find "artifacts/$1" -maxdepth 1 -name "$2-*" 2>/dev/null | wc -l
}

failed=0
summary=()
for t in "${run[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t" artifacts/logs
    if [[ -d "seeds/$t" ]]; then
        cp -n seeds/"$t"/* "corpus/$t"/ 2>/dev/null
    fi
    dict=()
    [[ -f "dict/$t.dict" ]] && dict=("-dict=dict/$t.dict")
    before=$(( $(count "$t" crash) + $(count "$t" timeout) + $(count "$t" oom) + $(count "$t" leak) ))
    log="artifacts/logs/$t.log"
    echo "== $t: ${seconds}s, -timeout=$timeout -rss_limit_mb=$rss ${dict[*]}"
    TIMEFORMAT='%U %S %R'
    # shellcheck disable=SC2086
    { time cargo fuzz run -s "$sanitizer" "$t" "corpus/$t" -- \
        -max_total_time="$seconds" -timeout="$timeout" -rss_limit_mb="$rss" \
        -print_final_stats=1 "${dict[@]}" \
        ${FUZZ_ARGS:-} >"$log" 2>&1 ; } 2>"artifacts/logs/$t.time"
    rc=$?
    read -r user sys real <"artifacts/logs/$t.time"
    cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.0f", u + s }')
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    [[ -z "$execs" ]] && execs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#')
    rss_peak=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
    crashes=$(count "$t" crash)
    timeouts=$(count "$t" timeout)
    ooms=$(count "$t" oom)
    leaks=$(count "$t" leak)
    files=$(find "corpus/$t" -type f | wc -l)
    bytes=$(du -sb "corpus/$t" | cut -f1)
    after=$(( crashes + timeouts + ooms + leaks ))
    status=ok
    if (( after > before )) || (( rc != 0 )); then
        status="FAILED (exit $rc)"
        failed=1
    fi
    rm -rf /dev/shm/hearth-fuzz-* 2>/dev/null
    line=$(printf '%-18s %12s %8s %7s %7s %8s %5s %7s %9s %6s  %s' "$t" "${execs:-?}" "${real%.*}" "$cpu" \
        "$crashes" "$timeouts" "$ooms" "$files" "$bytes" "${rss_peak:-?}" "$status")
    echo "$line"
    summary+=("$line")
done

echo
printf '%-18s %12s %8s %7s %7s %8s %5s %7s %9s %6s  %s\n' target execs wall_s cpu_s crashes timeouts ooms corpus bytes rss_mb status
printf '%s\n' "${summary[@]}"
echo "(crashes/timeouts/ooms count every artifact in fuzz/artifacts/TARGET, earlier runs' included)"
exit $failed
