#!/bin/sh
# Build the gateway's wheel and install it, with only its runtime dependencies and the "speed"
# (uvloop, httptools) and "postgres" (psycopg with its binary libpq, and its pool) extras, into a
# fresh virtual environment: one image serves a SQLite responses store and a PostgreSQL one.
# No torch, no Triton.
#
#   install-gateway.sh SOURCE_DIR VENV_DIR WHEEL_DIR
#
#   install-gateway.sh --compile SOURCE_DIR VENV_DIR WHEEL_DIR
#
# --compile also compiles the per-token modules to C with mypyc (scripts/compile.py; gateway/
# compiled.py says which and why), in a throwaway venv under WHEEL_DIR that has the compile extra,
# and puts the extensions beside the installed sources: the wheel stays pure Python, the venv gets
# no mypy. It needs a C compiler and Python's headers, and fails rather than install a slower
# gateway. The gateway then logs "per-token modules compiled" at startup.
#
# The Dockerfile's build stage runs exactly this, and so does tests/deploy/test_image_install.py
# (against a real Triton), so what the test proves is what the image contains.
# PYTHON picks the interpreter (default: python3).
set -eu

compile=0
if [ "${1:-}" = "--compile" ]; then
    compile=1
    shift
fi
if [ "$#" -ne 3 ]; then
    echo "usage: $0 [--compile] SOURCE_DIR VENV_DIR WHEEL_DIR" >&2
    exit 64
fi
source_dir=$1
venv_dir=$2
wheel_dir=$3
python=${PYTHON:-python3}

"$python" -m pip wheel --no-deps --wheel-dir "$wheel_dir" "$source_dir"
"$python" -m venv "$venv_dir"
set -- "$wheel_dir"/triton_openai_gateway-*.whl
if [ "$#" -ne 1 ] || [ ! -f "$1" ]; then
    echo "expected exactly one gateway wheel in $wheel_dir, found: $*" >&2
    exit 1
fi
"$venv_dir/bin/python" -m pip install --disable-pip-version-check "$1[speed,postgres]"
"$venv_dir/bin/python" -m pip check

if [ "$compile" = 1 ]; then
    build_venv="$wheel_dir/compile-venv"
    "$python" -m venv "$build_venv"
    # The runtime venv's dependencies too: mypy follows the imports, as in a checkout.
    "$build_venv/bin/python" -m pip install --disable-pip-version-check "$1[speed,postgres,compile]"
    "$build_venv/bin/python" -m pip uninstall --disable-pip-version-check -y triton-openai-gateway
    "$build_venv/bin/python" "$source_dir/scripts/compile.py"
    package=$("$venv_dir/bin/python" -I -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/gateway
    # The extensions and the build's record of the sources it compiled (byte for byte the ones
    # the wheel installed). pip's RECORD does not list them: an uninstall would leave them.
    (cd "$source_dir/gateway" && find . -name '*.so' -o -name _compiled.json) | while read -r built; do
        cp "$source_dir/gateway/$built" "$package/$built"
    done
    rm -rf "$build_venv"
    # -I: not the sources in the working directory (/src in the image), the venv's.
    state=$("$venv_dir/bin/python" -I -c 'import gateway.compiled as c; print(c.STATE, c.__file__)')
    if [ "$state" != "compiled $package/compiled.py" ]; then
        echo "the compiled modules do not load in $venv_dir: $state" >&2
        exit 1
    fi
fi
