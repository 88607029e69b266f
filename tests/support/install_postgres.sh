#!/bin/sh
# Installs Debian's PostgreSQL 15 server for the tests, once per machine: nothing is done when
# its binaries are already there. Several test runs may call this at once: the lock makes the
# second wait for the first, then find the binaries in place.
set -eu
POSTGRES=/usr/lib/postgresql/15/bin/postgres
[ -x "$POSTGRES" ] && exit 0
LOCK_DIR="${OTEL_LIFECYCLE_HOOKS_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/otel-lifecycle-hooks-tests}"
mkdir -p "$LOCK_DIR"
exec 9>"$LOCK_DIR/postgres-install.lock"
flock 9
[ -x "$POSTGRES" ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "install_postgres.sh: $POSTGRES is missing and only root can install it" >&2
    exit 2
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y postgresql >/dev/null 2>&1 || {
    apt-get update >/dev/null
    apt-get install -y postgresql >/dev/null
}
[ -x "$POSTGRES" ]
