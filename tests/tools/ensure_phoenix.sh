#!/bin/sh
# Makes Arize Phoenix (PyPI `arize-phoenix`) available in a virtual environment of its own:
# it pins its own OpenTelemetry SDK, which must not meet the project's.
#
# Usage: ensure_phoenix.sh [VENV_DIR]   (default: ~/.cache/otel-lifecycle-hooks-tests/phoenix-venv)
# PYTHON names the interpreter that creates the environment (default: python3).
# Idempotent: an environment whose stamp names the pinned version is kept as it is; a missing
# or half-built one is (re)built, which takes a few minutes and needs PyPI.
# Exit 0: `VENV_DIR/bin/phoenix` is ready. Anything else: the install failed (see stderr).
set -eu

PHOENIX_VERSION="20.26.1"
cache_dir=${OTEL_LIFECYCLE_HOOKS_TEST_CACHE:-"${XDG_CACHE_HOME:-$HOME/.cache}/otel-lifecycle-hooks-tests"}
venv_dir=${1:-"$cache_dir/phoenix-venv"}
python=${PYTHON:-python3}
stamp="$venv_dir/.phoenix-$PHOENIX_VERSION"

ready() { [ -f "$stamp" ] && [ -x "$venv_dir/bin/phoenix" ]; }

if ready; then
    exit 0
fi
mkdir -p "$(dirname -- "$venv_dir")"

# One installer at a time: a second caller waits, then finds the stamp.
if command -v flock >/dev/null 2>&1; then
    exec 9>"$venv_dir.lock"
    flock 9
    if ready; then
        exit 0
    fi
fi

echo "installing arize-phoenix==$PHOENIX_VERSION into $venv_dir (a few minutes, once)" >&2
rm -rf "$venv_dir"
"$python" -m venv "$venv_dir"
"$venv_dir/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
"$venv_dir/bin/python" -m pip install --quiet --disable-pip-version-check \
    "arize-phoenix==$PHOENIX_VERSION"
"$venv_dir/bin/phoenix" --help >/dev/null
touch "$stamp"
