#!/usr/bin/env bash
# Install the gateway (editable) with the extras given as the first argument (say 'local,test,speed')
# into .venv, creating it if needed; the log goes to .venv/install.log, and only a failure prints.
# uv installs when it can (scripts/installer.sh says why), and pip does it if uv fails.
#
# The venv's interpreter: $PYTHON if set, else the distribution's python3 (/usr/bin/python3) when it
# is 3.11 or newer and has venv, else the python3 on PATH; it must be 3.11 or newer (the gateway
# uses typing.Self, and CI type-checks 3.11). Distributions (Debian, Ubuntu, Fedora) build CPython
# with profile-guided and link-time optimization; pyenv's default build has neither and runs the
# gateway's per-token Python ~10 % slower (docs/DEPENDENCIES.md). An existing .venv is kept as it is.
#
# The gateway is pure Python: an extension module left in gateway/ would be imported in place of
# its source, so any is removed.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=$1
if [ ! -x .venv/bin/python ]; then
    python=${PYTHON:-}
    if [ -z "$python" ]; then
        python=python3
        if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' 2> /dev/null; then
            python=/usr/bin/python3
        fi
    fi
    if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2> /dev/null; then
        echo "the gateway needs Python 3.11 or newer, and $python is not: PYTHON=/path/to/python3 picks another" >&2
        exit 1
    fi
    "$python" -m venv .venv
elif ! .venv/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "the gateway needs Python 3.11 or newer, and .venv has $(.venv/bin/python -V): rm -rf .venv to rebuild it" >&2
    exit 1
fi
find gateway -name '*.so' -delete
log=.venv/install.log
# shellcheck source=scripts/installer.sh
. scripts/installer.sh
installer_for .venv
: > "$log"
installed=0
if [ "$INSTALLER" = uv ]; then
    if "${INSTALL[@]}" -e ".[$extras]" >> "$log" 2>&1; then
        installed=1
    else
        echo "uv could not install the gateway; installing with pip (see $log)" >&2
        pip_installer_for .venv
    fi
else
    echo "uv could not be installed; installing with pip (see $log)" >&2
fi
if [ "$installed" -eq 0 ] && ! "${INSTALL[@]}" -e ".[$extras]" >> "$log" 2>&1; then
    grep -v "^WARNING: Location" "$log" >&2
    echo "install failed (full log: $log)" >&2
    exit 1
fi
