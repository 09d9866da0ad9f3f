#!/usr/bin/env bash
# install-browser.sh — Debian's headless browser for the console tests (tests/test_console.py).
#
# Run as root on Debian 12 (bookworm). Idempotent: when /usr/bin/chromium and /usr/bin/chromedriver
# are there it only prints their versions. The tests drive this system browser through Selenium;
# nothing is downloaded at run time (no browser or driver manager, no network at test time).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

log() { printf '[install-browser] %s\n' "$*" >&2; }

if [ "$(id -u)" != 0 ]; then
    # Without root: nothing to do when the browser is installed; sudo when it may; else say so.
    if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
        exit 0
    fi
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        exec sudo -n "$0" "$@"
    fi
    echo "browser tests skipped: Debian's chromium is not installed and installing it needs root (as root: make browser)"
    exit 0
fi

if ! { [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; }; then
    log "installing chromium and chromium-driver from Debian"
    if ! apt-get install -y chromium chromium-driver >/dev/null 2>&1; then
        apt-get update -qq
        apt-get install -y chromium chromium-driver >/dev/null
    fi
fi

# chromium's wrapper script prints a shell warning on some systems; the version line is what counts.
log "$(/usr/bin/chromium --version 2>/dev/null | tail -1); $(/usr/bin/chromedriver --version | cut -d' ' -f1-2)"
