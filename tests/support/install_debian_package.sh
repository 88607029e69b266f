#!/bin/sh
# install_debian_package.sh PACKAGE BINARY: installs Debian's PACKAGE for the tests, once per
# machine: nothing is done when BINARY is already there. Several test runs may call this at
# once: the lock makes the second wait for the first, then find BINARY in place.
set -eu
PACKAGE=$1
BINARY=$2
[ -x "$BINARY" ] && exit 0
LOCK_DIR="${OTEL_LIFECYCLE_HOOKS_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/otel-lifecycle-hooks-tests}"
mkdir -p "$LOCK_DIR"
exec 9>"$LOCK_DIR/$PACKAGE-install.lock"
flock 9
[ -x "$BINARY" ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "install_debian_package.sh: $BINARY is missing and only root can install $PACKAGE" >&2
    exit 2
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y "$PACKAGE" >/dev/null 2>&1 || {
    apt-get update >/dev/null
    apt-get install -y "$PACKAGE" >/dev/null
}
[ -x "$BINARY" ]
