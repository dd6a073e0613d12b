#!/usr/bin/env bash
# Install Chromium (Debian's package `chromium`) for the status page's browser test
# (tests/test_status_page.py runs it headless: it renders /status, dumps its DOM and takes
# a screenshot). Nothing is started here, and the test starts and stops its own browser.
#
# Idempotent: when /usr/bin/chromium is already there it prints its version and does
# nothing. Runs as root (apt-get directly) or, when not root, through sudo if there is one.
set -euo pipefail

chromium=/usr/bin/chromium

version() {
    # Chromium may complain on stderr without a display or a D-Bus: only its version line.
    "$chromium" --version 2>/dev/null | head -n 1 || echo "chromium (version unknown)"
}

if [[ -x "$chromium" ]]; then
    echo "install-chromium: $(version) at $chromium"
    exit 0
fi

if [[ "$(id -u)" -eq 0 ]]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
else
    echo "install-chromium: $chromium is missing and this is not root (and there is no sudo):" >&2
    echo "install-chromium: install the Debian package chromium by hand" >&2
    exit 1
fi

echo "install-chromium: installing the Debian package chromium (apt-get)"
"${as_root[@]}" apt-get update -qq
status=0
apt_log="$(mktemp)"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends chromium >"$apt_log" 2>&1 || status=$?
if [[ "$status" -ne 0 ]]; then
    cat "$apt_log" >&2
    rm -f "$apt_log"
    echo "install-chromium: apt-get install chromium failed (exit $status)" >&2
    exit "$status"
fi
rm -f "$apt_log"
if [[ ! -x "$chromium" ]]; then
    echo "install-chromium: apt-get installed chromium but $chromium is not there" >&2
    exit 1
fi
echo "install-chromium: installed $(version) at $chromium"
