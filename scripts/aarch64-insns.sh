#!/usr/bin/env bash
# How many AArch64 instructions a prompt's prefill executes on each AArch64
# tier, counted under qemu-user by a small plugin (scripts/qemu/insn-count.c):
# no ARM machine is at hand, so instruction counts stand in for timings (an
# instruction count is not a speed, but a kernel that does the same work in
# a fifth of the instructions is faster on any core).
#
#   bash scripts/aarch64-insns.sh [TOKENS] [--profile TIER]
#
# Runs the model crate's `arch_check` example for AArch64 on the real model
# (scripts/fetch-model.sh) with TOKENS prompt tokens in one batch (default
# 128) and with one, so the difference is the prefill of TOKENS - 1 tokens,
# on every tier the AArch64 binary lists. `--profile TIER` also prints where
# that tier's instructions went, by function.
#
# Needs what scripts/test-aarch64.sh needs (run it with --install once) and
# a C compiler for the plugin.
set -euo pipefail
cd "$(dirname "$0")/.."

tokens=128
profile=""
while (($#)); do
    case "$1" in
        --profile) profile=${2:?--profile needs a tier}; shift 2 ;;
        *[!0-9]* | "") echo "usage: $0 [TOKENS] [--profile TIER]" >&2; exit 2 ;;
        *) tokens=$1; shift ;;
    esac
done
((tokens >= 2)) || { echo "aarch64-insns: TOKENS must be at least 2" >&2; exit 2; }

model=${HEARTH_MODEL:-${HEARTH_HOME:-$HOME/.cache/hearth}/models/gemma-3-270m-q4_k_m.gguf}
[[ -f "$model" ]] || { echo "aarch64-insns: no model at $model (scripts/fetch-model.sh)" >&2; exit 1; }
for tool in qemu-aarch64 aarch64-linux-gnu-gcc aarch64-linux-gnu-nm cc python3; do
    command -v "$tool" >/dev/null || { echo "aarch64-insns: $tool is missing (scripts/test-aarch64.sh --install)" >&2; exit 1; }
done

T=aarch64-unknown-linux-gnu
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
cargo build --profile ci --target "$T" -p hearth-model --example arch_check >&2
bin="target/$T/ci/examples/arch_check"
plugin=target/qemu-insn-count.so
cc -shared -fPIC -O2 -Wall -o "$plugin" scripts/qemu/insn-count.c

# A fixed prompt of ordinary token ids.
ids=$(python3 -c "print(','.join(str(2 + i * 7919 % 20000) for i in range($tokens)))")
first=${ids%%,*}

count() { # tier, ids -> guest instructions (TOP 0: only the last position's logits)
    qemu-aarch64 -L /usr/aarch64-linux-gnu -plugin "$plugin" "$bin" "$model" "$2" "$tokens" 0 0 "$1" 2>&1 >/dev/null |
        sed -n 's/^guest instructions: //p'
}

echo "model $model, prefill of $tokens tokens in one batch, guest instructions (qemu-user)"
printf '%-10s %16s %16s %16s\n' tier "$tokens tokens" "1 token" "prefill"
for tier in $(qemu-aarch64 -L /usr/aarch64-linux-gnu "$bin" --tiers); do
    all=$(count "$tier" "$ids")
    one=$(count "$tier" "$first")
    printf '%-10s %16s %16s %16s\n' "$tier" "$all" "$one" "$((all - one))"
done

if [[ -n "$profile" ]]; then
    out=$(mktemp)
    QEMU_INSN_PROFILE=$out qemu-aarch64 -L /usr/aarch64-linux-gnu -plugin "$plugin" \
        "$bin" "$model" "$ids" "$tokens" 0 0 "$profile" >/dev/null 2>&1
    echo "where $profile's instructions went ($tokens tokens), by function:"
    python3 - "$bin" "$out" <<'EOF'
import bisect, collections, subprocess, sys
binary, path = sys.argv[1], sys.argv[2]
nm = subprocess.run(["aarch64-linux-gnu-nm", "-C", "-S", "--defined-only", binary],
                    capture_output=True, text=True, check=True).stdout
syms = []
for line in nm.splitlines():
    parts = line.split(" ", 3)
    if len(parts) == 4 and parts[2] in "tTwW":
        syms.append((int(parts[0], 16), int(parts[1], 16), parts[3]))
syms.sort()
starts = [a for a, _, _ in syms]
# qemu-user loads a position-independent executable at this base.
BASE = 0x5500000000
per = collections.Counter()
for line in open(path):
    va, n = line.split()
    off = int(va, 16) - BASE
    i = bisect.bisect_right(starts, off) - 1
    inside = i >= 0 and off < syms[i][0] + syms[i][1]
    per[syms[i][2][:100] if inside else "(the C library and loader)"] += int(n)
total = sum(per.values())
for name, n in per.most_common(15):
    print(f"{100 * n / total:5.1f}% {n:>14} {name}")
EOF
    rm -f "$out"
fi
