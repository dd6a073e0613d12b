#!/usr/bin/env bash
# Install Chromium (Debian's package `chromium`) for the status page's browser test
# (tests/test_status_page.py runs it headless: it renders /status, dumps its DOM and takes
# a screenshot). Nothing is started here, and the test starts and stops its own browser.
#
# Idempotent: when /usr/bin/chromium is already there it prints its version and does
# nothing. Runs as root (apt-get directly) or, when not root, through sudo if there is one.
set -euo pipefail
cd "$(dirname "$0")"

chromium=/usr/bin/chromium

version() {
    # Chromium may complain on stderr without a display or a D-Bus: only its version line.
    "$chromium" --version 2>/dev/null | head -n 1 || echo "chromium (version unknown)"
}

if [[ -x "$chromium" ]]; then
    echo "install-chromium: $(version) at $chromium"
    exit 0
fi
./apt-install.sh install-chromium chromium
if [[ ! -x "$chromium" ]]; then
    echo "install-chromium: apt-get installed chromium but $chromium is not there" >&2
    exit 1
fi
echo "install-chromium: installed $(version) at $chromium"
