#!/bin/sh
# Makes `promtool` and `prometheus` available, from Debian's `prometheus` package.
# Exit 0: both on PATH. Exit 2: missing and not root, so nothing could be installed.
set -eu
if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "promtool/prometheus missing and not root: install Debian's 'prometheus' package" >&2
    exit 2
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq prometheus >/dev/null
command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1
