#!/usr/bin/env bash
# Install the gateway (editable) with the extras given as the first argument (say 'local,test,speed')
# into .venv, creating it if needed; the log goes to .venv/install.log, and only a failure prints.
# uv installs when it can (scripts/installer.sh says why), and pip does it if uv fails.
#
# The venv's interpreter: $PYTHON if set, else the distribution's python3 (/usr/bin/python3) when it
# is 3.10 or newer and has venv, else the python3 on PATH. Distributions (Debian, Ubuntu, Fedora)
# build CPython with profile-guided and link-time optimization; pyenv's default build, first on
# this machine's PATH, has neither, and runs the gateway's per-token Python ~10 % slower
# (docs/PERFORMANCE.md, "Eighteenth session"). An existing .venv is kept as it is.
#
# With the compile extra, the per-token modules are then compiled with mypyc (scripts/compile.py,
# ~30 s; gateway/compiled.py says why); COMPILE=0 removes any earlier build instead, and a
# failure (no C compiler) leaves the gateway running its Python sources, with a warning.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=$1
if [ ! -x .venv/bin/python ]; then
    python=${PYTHON:-}
    if [ -z "$python" ]; then
        python=python3
        if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 10))' 2> /dev/null; then
            python=/usr/bin/python3
        fi
    fi
    "$python" -m venv .venv
fi
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
case ",$extras," in
    *,compile,*)
        if [ "${COMPILE:-1}" = 0 ]; then
            .venv/bin/python scripts/compile.py --clean
        elif ! .venv/bin/python scripts/compile.py >> "$log" 2>&1; then
            tail -n 20 "$log" >&2
            echo "warning: the per-token modules could not be compiled; the gateway runs its Python sources (full log: $log)" >&2
        fi
        ;;
esac
