#!/bin/sh
# Installs Debian's Chromium for the web page's browser test, once per machine: nothing is done
# when the binary is already there. Several test runs may call this at once: the lock makes the
# second wait for the first, then find the binary in place. Playwright drives this binary; its
# own browser download is never used.
set -eu
CHROMIUM=/usr/bin/chromium
[ -x "$CHROMIUM" ] && exit 0
LOCK_DIR="${OTEL_LIFECYCLE_HOOKS_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/otel-lifecycle-hooks-tests}"
mkdir -p "$LOCK_DIR"
exec 9>"$LOCK_DIR/chromium-install.lock"
flock 9
[ -x "$CHROMIUM" ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "install_chromium.sh: $CHROMIUM is missing and only root can install it" >&2
    exit 2
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y chromium >/dev/null 2>&1 || {
    apt-get update >/dev/null
    apt-get install -y chromium >/dev/null
}
[ -x "$CHROMIUM" ]
