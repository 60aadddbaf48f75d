#!/usr/bin/env bash
# Installs Debian's headless Chromium and its WebDriver (chromedriver) for the
# browser test of `hearth eval grade` (crates/eval/tests/it/grade_browser.rs).
# Needs root (or sudo) and apt; does nothing when chromedriver is already there.
set -euo pipefail
if command -v chromedriver >/dev/null 2>&1; then
    echo "chromedriver already installed: $(command -v chromedriver)"
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends chromium chromium-driver
chromedriver --version
