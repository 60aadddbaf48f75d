#!/bin/sh
# The gates CI holds every change to, before the tests: formatting, clippy
# with warnings as errors (the workspace's lints in Cargo.toml: unsafe blocks
# say why they are sound, functions fit on a screen), every path and item
# docs/ARCHITECTURE.md names still existing, and no broken relative link in
# the Markdown files.
set -eu
cd "$(dirname "$0")/.."
cargo fmt --all --check
cargo clippy --workspace --all-targets --profile ci -- -D warnings
python3 scripts/check-architecture.py
python3 scripts/check-links.py
