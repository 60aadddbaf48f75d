#!/usr/bin/env bash
# The browser tests in headless Chromium via chromedriver: the grading page
# (crates/eval/tests/it/grade_browser.rs) and the chat page on the real 270M
# (crates/cli/tests/it/chat_page_browser.rs; HEARTH_UPDATE_SCREENSHOTS=1 writes
# its screenshots into docs/img). Installs Chromium first when
# chromedriver is missing (needs apt and root/sudo). The test is #[ignore]d
# in plain `cargo test` because it is slow and needs the browser.
# Leaves a screenshot at <target dir>/grade-page.png.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromedriver >/dev/null 2>&1; then
    scripts/install-chromium.sh
fi
cargo test --profile ci -p hearth-eval --test it -- --ignored --nocapture grade_browser:: "$@"
cargo test --profile ci -p hearth-cli --test it -- --ignored --nocapture chat_page_browser:: "$@"
