# Sourced by scripts/install.sh and scripts/vllm-lane.sh: picks how packages get into a venv.
#
# installer_for VENV sets INSTALL and UNINSTALL (arrays) to commands that install into and remove
# from VENV: uv when pip can install it there, else pip itself. uv resolves and installs what pip
# does in seconds where pip takes minutes (1 min 45 s for the main stack, 2-3 min for the vLLM
# lane's), and the suite waits for both. It gets the indexes and links pip is configured with (this
# machine's pip.conf and PIP_* variables name local wheel mirrors and the CPU torch wheel, which uv
# would not look at by itself), and like pip it takes the best version from any of them.
# INSTALLER is "uv" or "pip".

# Every value pip is configured with for one option (all its scopes and PIP_* variables), one per line.
_pip_option() {
    "$1" -m pip --disable-pip-version-check config list 2>/dev/null |
        sed -n "s/^[^=]*\.$2='\(.*\)'$/\1/p" | tr ' ' '\n' | awk 'NF && !seen[$0]++'
}

installer_for() {
    local venv=$1
    local python=$venv/bin/python
    if "$python" -m pip --disable-pip-version-check install -q 'uv>=0.9,<1' > /dev/null 2>&1; then
        INSTALLER=uv
        INSTALL=("$venv/bin/uv" pip install --python "$python" --index-strategy unsafe-best-match)
        UNINSTALL=("$venv/bin/uv" pip uninstall --python "$python")
        local value
        for value in $(_pip_option "$python" index-url | tail -n 1); do INSTALL+=(--index-url "$value"); done
        for value in $(_pip_option "$python" extra-index-url); do INSTALL+=(--extra-index-url "$value"); done
        for value in $(_pip_option "$python" find-links); do INSTALL+=(--find-links "$value"); done
        value=$(_pip_option "$python" cert | tail -n 1) || value=
        if [ -n "$value" ] && [ -z "${SSL_CERT_FILE:-}" ]; then
            export SSL_CERT_FILE=$value
        fi
    else
        INSTALLER=pip
        INSTALL=("$python" -m pip --disable-pip-version-check install --no-compile)
        UNINSTALL=("$python" -m pip --disable-pip-version-check uninstall -y)
    fi
}
