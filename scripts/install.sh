#!/usr/bin/env bash
# Install the gateway (editable) with the extras given as the first argument (say 'local,test,speed')
# into .venv, creating it if needed; the log goes to .venv/install.log, and only a failure prints.
#
# uv does the install, fetching from the indexes and links pip is configured with (this machine's
# pip.conf and PIP_* variables name local wheel mirrors and the CPU torch wheel, which uv would not
# look at by itself), and like pip it takes the best version from any of them. It resolves and
# installs what pip does in ~10 s where pip took ~1 min 45 s, which is a phase the whole suite waits
# for. If uv cannot be installed (no network for PyPI, say), pip does it as before.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=$1
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
log=.venv/install.log
pip=(.venv/bin/python -m pip --disable-pip-version-check)

# Every value pip is configured with for one option (all its scopes and PIP_* variables), space-separated.
pip_option() {
    "${pip[@]}" config list 2>/dev/null | sed -n "s/^[^=]*\.$1='\(.*\)'$/\1/p" | tr ' ' '\n' | awk 'NF && !seen[$0]++' | tr '\n' ' '
}

if "${pip[@]}" install -q 'uv>=0.9,<1' > "$log" 2>&1; then
    args=(--python .venv/bin/python --index-strategy unsafe-best-match)
    index=$(pip_option index-url)
    for url in ${index}; do args+=(--index-url "$url"); done
    for url in $(pip_option extra-index-url); do args+=(--extra-index-url "$url"); done
    for link in $(pip_option find-links); do args+=(--find-links "$link"); done
    cert=$(pip_option cert)
    if [ -n "${cert// /}" ] && [ -z "${SSL_CERT_FILE:-}" ]; then
        export SSL_CERT_FILE=${cert%% *}
    fi
    if .venv/bin/uv pip install "${args[@]}" -e ".[$extras]" >> "$log" 2>&1; then
        exit 0
    fi
    echo "uv could not install the gateway; installing with pip (see $log)" >&2
else
    echo "uv could not be installed; installing with pip (see $log)" >&2
fi
installed=0
"${pip[@]}" install --no-compile -e ".[$extras]" >> "$log" 2>&1 || installed=$?
if [ "$installed" -ne 0 ]; then
    grep -v "^WARNING: Location" "$log" >&2
    echo "install failed (full log: $log)" >&2
    exit 1
fi
