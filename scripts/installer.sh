# Sourced by scripts/install.sh and scripts/vllm-lane.sh: picks how packages get into a venv.
#
# installer_for VENV sets INSTALL and UNINSTALL (arrays) to commands that install into and remove
# from VENV: uv when it is in VENV or pip can install it there, else pip itself (pip_installer_for).
# uv resolves and installs what pip does in seconds where pip takes minutes (1 min 45 s for the
# main stack, 2-3 min for the vLLM lane's), and the suite waits for both. It gets the indexes and
# links pip is configured with (this machine's pip.conf and PIP_* variables name local wheel
# mirrors and the CPU torch wheel, which uv would not look at by itself), and like pip it takes the
# best version from any of them. INSTALLER is "uv" or "pip".

# Every value of one option ($2) in pip's `config list` output ($1: all its scopes and PIP_*
# variables), one per line.
_pip_option() {
    printf '%s\n' "$1" | sed -n "s/^[^=]*\.$2='\(.*\)'$/\1/p" | tr ' ' '\n' | awk 'NF && !seen[$0]++'
}

pip_installer_for() {
    local python=$1/bin/python
    INSTALLER=pip
    INSTALL=("$python" -m pip --disable-pip-version-check install --no-compile)
    UNINSTALL=("$python" -m pip --disable-pip-version-check uninstall -y)
}

installer_for() {
    local venv=$1
    local python=$venv/bin/python
    if ! [ -x "$venv/bin/uv" ] && ! "$python" -m pip --disable-pip-version-check install -q 'uv>=0.9,<1' > /dev/null 2>&1; then
        pip_installer_for "$venv"
        return
    fi
    INSTALLER=uv
    INSTALL=("$venv/bin/uv" pip install --python "$python" --index-strategy unsafe-best-match)
    UNINSTALL=("$venv/bin/uv" pip uninstall --python "$python")
    local config value
    config=$("$python" -m pip --disable-pip-version-check config list 2>/dev/null) || config=
    for value in $(_pip_option "$config" index-url | tail -n 1); do INSTALL+=(--index-url "$value"); done
    for value in $(_pip_option "$config" extra-index-url); do INSTALL+=(--extra-index-url "$value"); done
    for value in $(_pip_option "$config" find-links); do INSTALL+=(--find-links "$value"); done
    value=$(_pip_option "$config" cert | tail -n 1)
    if [ -n "$value" ] && [ -z "${SSL_CERT_FILE:-}" ]; then
        export SSL_CERT_FILE=$value
    fi
}
