#!/usr/bin/env bash
# AArch64 under qemu-user: the kernels of every AArch64 tier (scalar, neon,
# dotprod; qemu's CPU has dotprod) held to the same property tests as on
# x86, the format, model and tokenizer tests, and then the same prompts
# through this machine's model and the AArch64 one (the model crate's
# `arch_check` example), compared bit for bit: a prompt's logits and greedy
# tokens must not depend on the architecture; and a saved prompt state
# loaded back on each AArch64 tier.
#
#   bash scripts/test-aarch64.sh [--install] [--full]
#
# Needs rustup's aarch64-unknown-linux-gnu target, Debian's
# gcc-aarch64-linux-gnu (the linker) and qemu-user. --install installs them
# (a failed install is reported and the script skips, so a CI machine
# without network access is not failed by it); without --install a missing
# tool is reported and the script skips (exit 0). --full also builds every
# target of the workspace for AArch64 (minutes more).
set -euo pipefail
cd "$(dirname "$0")/.."

install=0
full=0
for arg in "$@"; do
    case "$arg" in
        --install) install=1 ;;
        --full) full=1 ;;
        *) echo "usage: $0 [--install] [--full]" >&2; exit 2 ;;
    esac
done

have_target() { rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu; }
have_tools() { command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null; }

if ((install)); then
    if ! have_target; then
        timeout 300 rustup target add aarch64-unknown-linux-gnu >&2 ||
            echo "test-aarch64: could not add the Rust target" >&2
    fi
    if ! have_tools; then
        { timeout 300 apt-get update && timeout 600 apt-get install -y \
            gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user; } >&2 ||
            echo "test-aarch64: could not install the cross linker and qemu-user" >&2
    fi
fi
missing=()
have_target || missing+=("rust target aarch64-unknown-linux-gnu")
command -v aarch64-linux-gnu-gcc >/dev/null || missing+=("aarch64-linux-gnu-gcc")
command -v qemu-aarch64 >/dev/null || missing+=("qemu-aarch64")
if ((${#missing[@]})); then
    echo "test-aarch64: skipped, missing: ${missing[*]} (run with --install)"
    exit 0
fi

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
# pumpkin-solver's build script compiles C++ proof checkers for its own
# tests; there is no AArch64 C++ compiler here and we do not run them.
export NO_CHECKERS=true
T=aarch64-unknown-linux-gnu

if ((full)); then
    cargo build --profile ci --target "$T" --workspace --all-targets
fi
# The AArch64 code holds the same lints (its kernels' unsafe blocks
# included), checked without running.
cargo clippy --profile ci --target "$T" --all-targets \
    -p hearth-threads -p hearth-quant -p hearth-nn -p hearth-gguf -p hearth-model -p hearth-tokenizer -- -D warnings
# The kernel, format, model and tokenizer tests under emulation (the other
# crates drive the same code; below, the model runs on both machines).
cargo test --profile ci --target "$T" --no-fail-fast \
    -p hearth-threads -p hearth-quant -p hearth-nn -p hearth-gguf -p hearth-model -p hearth-tokenizer

# The comparison runs the model crate's `arch_check` example, whose
# dependencies the tests above built already (the whole CLI for AArch64
# would build every front end's dependencies for minutes, to run the same
# model code).
cargo build --profile ci --target "$T" -p hearth-model --example arch_check
cargo build --profile ci -p hearth-model --example arch_check
host=target/ci/examples/arch_check
arm=(qemu-aarch64 -L /usr/aarch64-linux-gnu "target/$T/ci/examples/arch_check")

# The tiers the AArch64 binary runs.
tiers=$("${arm[@]}" --tiers)
[[ -n "$tiers" ]] || { echo "test-aarch64: the AArch64 binary listed no tiers" >&2; exit 1; }
echo "test-aarch64: AArch64 tiers: $tiers"

fail=0
compare() { # name, model, ids, batch, top, greedy
    local name=$1
    shift
    local want got
    want=$("$host" "$@" scalar 2>/dev/null)
    [[ -n "$want" ]] || { echo "FAIL $name: no output on this machine" >&2; fail=1; return; }
    for tier in $tiers; do
        got=$("${arm[@]}" "$@" "$tier" 2>/dev/null)
        if [[ "$got" == "$want" ]]; then
            echo "ok: $name on aarch64 $tier"
        else
            echo "FAIL: $name on aarch64 $tier differs from $(uname -m)" >&2
            fail=1
        fi
    done
}

ids="2,17,300,45,9,120,77,8,250,33,61,500,12,99,140,7,220,310,5,88"
for m in gemma2/model-q8_0.gguf gemma3/model-f32.gguf gemma3/model-q8_0.gguf gemma3_h256/model-q4_k_m.gguf \
    gemma3_h256/model-q6_k.gguf gemma3_h256/model-iq4_nl.gguf gemma3_h256/model-iq4_xs.gguf \
    gemma4_e2b_h256/model-q4_k_m.gguf gemma4_moe/model-q8_0.gguf; do
    f=tests/fixtures/tiny/$m
    # One token at a time (the decode products), then batches of 8 and 64
    # (the panel products); each run ends with 24 greedy tokens.
    for batch in 1 8 64; do
        compare "$m batch $batch" "$f" "$ids" "$batch" 512 24
    done
done
# The real model when it is on disk (scripts/fetch-model.sh); emulation makes
# it seconds per tier, so a short prompt.
real=${HEARTH_MODEL:-${HEARTH_HOME:-$HOME/.cache/hearth}/models/gemma-3-270m-q4_k_m.gguf}
if [[ -f "$real" ]]; then
    compare "270M batch 8" "$real" 2,818,5279,529,7001,563,9079,236761,669,5279 8 64 8
else
    echo "test-aarch64: the real model is not on disk; its comparison skipped (scripts/fetch-model.sh)"
fi
# Prompt states (the prompt cache's): a state saved and loaded back serves
# the next turn with the live session's logits, bit for bit, on each
# AArch64 tier (every tiny architecture and cache type; the test's own
# every-tier runner cannot start itself under qemu-user, so the tiers are
# run here one by one).
saved=saved_prompt::a_loaded_state_serves_the_next_turn_as_the_live_session_would
for tier in $tiers; do
    if HEARTH_CPU=$tier cargo test --profile ci --target "$T" -p hearth-engine --test it -- --exact "$saved" 2>&1 |
        grep -q '^test result: ok. 1 passed'; then
        echo "ok: saved prompt states on aarch64 $tier"
    else
        echo "FAIL: saved prompt states on aarch64 $tier" >&2
        fail=1
    fi
done
if ((fail)); then
    echo "test-aarch64: FAILED: AArch64 output differs or a state did not load alike" >&2
    exit 1
fi
echo "test-aarch64: passed"
