#!/usr/bin/env bash
# The AArch64 build and its tests under qemu-user: the portable kernels
# (what a Raspberry Pi runs today) held to the same tests as on x86.
#
# Needs: rustup's aarch64-unknown-linux-gnu target, Debian's
# gcc-aarch64-linux-gnu (the linker) and qemu-user. With --install it
# installs them; without, it skips (exit 0, said so) when one is missing,
# so CI runs it only where the tools are.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == "--install" ]]; then
    rustup target add aarch64-unknown-linux-gnu
    if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
        apt-get update
        apt-get install -y gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
    fi
fi
missing=()
rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu || missing+=("rust target aarch64-unknown-linux-gnu")
command -v aarch64-linux-gnu-gcc >/dev/null || missing+=("aarch64-linux-gnu-gcc")
command -v qemu-aarch64 >/dev/null || missing+=("qemu-aarch64")
if ((${#missing[@]})); then
    echo "test-aarch64: skipped, missing: ${missing[*]} (run with --install)"
    exit 0
fi

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
# The whole workspace must build; the kernel, format, model and tokenizer
# crates' tests run (the rest drive the same code through the binary and
# the real model, which is minutes of emulation each).
cargo build --release --target aarch64-unknown-linux-gnu --workspace --all-targets
cargo test --release --target aarch64-unknown-linux-gnu \
    -p hearth-quant -p hearth-gguf -p hearth-model -p hearth-tokenizer
