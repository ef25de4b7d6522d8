"""Compile the gateway's per-token modules to C with mypyc, in place (``gateway.compiled`` says why
and which), and record the sources' hashes so a later edit is noticed; ``--clean`` removes the build.

    .venv/bin/python scripts/compile.py            # ~30 s: needs the compile extra (mypy) and a C compiler
    .venv/bin/python scripts/compile.py --clean

The gateway imports whatever this built only while every compiled source is unchanged since; it
runs the sources otherwise (``gateway.compiled.guard``).
"""

from __future__ import annotations

import argparse
import importlib.machinery
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gateway.compiled import (  # noqa: E402
    COMPILED_MODULES,
    GROUP,
    PACKAGE_DIR,
    STAMP,
    source_hash,
    source_path,
)


def clean() -> None:
    """Every extension module in the package (the gateway has none but this build's), so a module
    taken off the list does not keep loading as its old compiled self."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        for path in PACKAGE_DIR.rglob("*" + suffix):
            path.unlink()
    STAMP.unlink(missing_ok=True)


def build() -> None:
    import warnings

    from mypyc.build import mypycify
    from setuptools import setup

    warnings.filterwarnings("ignore", module="setuptools")  # about pyproject.toml, which setup() reads too

    clean()
    leftover = ROOT / "build"
    had_build_dir = leftover.exists()
    sources = [str(source_path(m).relative_to(ROOT)) for m in COMPILED_MODULES]
    hashes = {m: source_hash(source_path(m)) for m in COMPILED_MODULES}
    with tempfile.TemporaryDirectory(prefix="gateway-mypyc-") as temp:
        os.chdir(ROOT)  # mypy reads pyproject.toml's [tool.mypy] from here, and the paths are relative to it
        extensions = mypycify(sources, opt_level="3", group_name=GROUP, target_dir=str(Path(temp) / "c"))
        setup(
            name="gateway-native",
            ext_modules=extensions,
            script_args=["--quiet", "build_ext", "--inplace", "--build-temp", str(Path(temp) / "o")],
        )
    if not had_build_dir:  # what setuptools leaves besides the in-place copies
        shutil.rmtree(leftover, ignore_errors=True)
    STAMP.write_text(
        json.dumps({"suffix": importlib.machinery.EXTENSION_SUFFIXES[0], "sources": hashes}, indent=1) + "\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clean", action="store_true", help="remove the compiled modules and the record")
    args = parser.parse_args()
    if args.clean:
        clean()
    else:
        build()
    return 0


if __name__ == "__main__":
    sys.exit(main())
