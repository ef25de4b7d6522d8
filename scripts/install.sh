#!/usr/bin/env bash
# Install the gateway (editable) with the extras given as the first argument (say 'local,test,speed')
# into .venv, creating it if needed; the log goes to .venv/install.log, and only a failure prints.
# uv installs when it can (scripts/installer.sh says why), and pip does it if uv fails.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=$1
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
log=.venv/install.log
# shellcheck source=scripts/installer.sh
. scripts/installer.sh
installer_for .venv
: > "$log"
if [ "$INSTALLER" = uv ]; then
    if "${INSTALL[@]}" -e ".[$extras]" >> "$log" 2>&1; then
        exit 0
    fi
    echo "uv could not install the gateway; installing with pip (see $log)" >&2
    pip_installer_for .venv
else
    echo "uv could not be installed; installing with pip (see $log)" >&2
fi
if ! "${INSTALL[@]}" -e ".[$extras]" >> "$log" 2>&1; then
    grep -v "^WARNING: Location" "$log" >&2
    echo "install failed (full log: $log)" >&2
    exit 1
fi
