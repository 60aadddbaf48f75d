#!/usr/bin/env bash
# The grading page's browser test (crates/eval/tests/grade_browser.rs) in
# headless Chromium via chromedriver. Installs Chromium first when
# chromedriver is missing (needs apt and root/sudo). The test is #[ignore]d
# in plain `cargo test` because it is slow and needs the browser.
# Leaves a screenshot at <target dir>/grade-page.png.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromedriver >/dev/null 2>&1; then
    scripts/install-chromium.sh
fi
exec cargo test --profile ci -p hearth-eval --test grade_browser -- --ignored --nocapture "$@"
