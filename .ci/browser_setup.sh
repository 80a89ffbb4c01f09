#!/usr/bin/env bash
# Install the headless browser of the browser tests (tests/test_viewer_browser.py, the demo page
# in tests/test_demo.py; selenium drives it). Debian 12, run as root.
# Idempotent: does nothing when chromium and chromedriver are already on PATH.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    echo "browser_setup: chromium and chromedriver already installed"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends chromium chromium-driver fonts-dejavu-core
