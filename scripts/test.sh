#!/bin/sh
# The whole test suite: fetches the real model once (cached), then runs every
# crate's unit, property and end-to-end tests in release mode.
set -eu
cd "$(dirname "$0")/.."
HEARTH_MODEL=$(sh scripts/fetch-model.sh)
export HEARTH_MODEL
cargo test --workspace --release
