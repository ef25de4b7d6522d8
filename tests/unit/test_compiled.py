"""The mypyc build of the per-token modules (``gateway.compiled``): used whole or not at all.

Each case imports a copy of the package in a fresh interpreter, since the guard acts on import."""

from __future__ import annotations

import importlib
import importlib.machinery
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import gateway
from gateway import compiled

PACKAGE = Path(gateway.__file__).resolve().parent
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]

REPORT = """
import json, gateway, gateway.compiled as c
files = {m: __import__(m, fromlist=["_"]).__file__ for m in c.COMPILED_MODULES}
print(json.dumps({"state": c.STATE, "files": files}))
"""


def run_in_copy(root: Path, script: str) -> str:
    """``script``'s output in a fresh interpreter that imports the package copied under ``root``."""
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=root, env={"PYTHONPATH": str(root)}, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def import_copy(root: Path) -> dict[str, object]:
    """What a fresh interpreter makes of the package copied under ``root``."""
    result: dict[str, object] = json.loads(run_in_copy(root, REPORT))
    return result


def copy_package(tmp_path: Path) -> Path:
    shutil.copytree(PACKAGE, tmp_path / "gateway", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_the_tree_the_tests_run_is_compiled_whole_or_not_at_all() -> None:
    assert compiled.STATE in ("compiled", "interpreted")
    modules = [importlib.import_module(m) for m in compiled.COMPILED_MODULES]
    assert {compiled.is_compiled(m) for m in modules} == {compiled.STATE == "compiled"}


def test_a_build_whose_record_does_not_match_is_not_imported(tmp_path: Path) -> None:
    # Extensions that cannot load (empty files) and a record naming other sources: importing any of
    # them would fail, so the modules must come from their sources.
    root = copy_package(tmp_path)
    for module in compiled.COMPILED_MODULES:
        (root / (module.replace(".", "/") + SUFFIX)).write_bytes(b"")
    (root / "gateway" / (compiled.SHARED_LIBRARY + SUFFIX)).write_bytes(b"")
    sources = {m: "0" * 64 for m in compiled.COMPILED_MODULES}
    (root / "gateway" / "_compiled.json").write_text(json.dumps({"suffix": SUFFIX, "sources": sources}))
    report = import_copy(root)
    assert str(report["state"]).startswith("interpreted (stale build: gateway.backend.transport.base changed")
    files = report["files"]
    assert isinstance(files, dict)
    assert all(str(path).endswith(".py") for path in files.values())


def test_extensions_without_a_record_are_not_imported(tmp_path: Path) -> None:
    root = copy_package(tmp_path)
    (root / "gateway" / "_compiled.json").unlink(missing_ok=True)
    (root / "gateway/core/assemble").with_suffix(SUFFIX).write_bytes(b"")
    report = import_copy(root)
    assert "no readable record of the build" in str(report["state"])


@pytest.mark.skipif(compiled.STATE != "compiled", reason="the per-token modules are not compiled here")
def test_one_edited_source_sends_every_compiled_module_back_to_its_source(tmp_path: Path) -> None:
    root = copy_package(tmp_path)
    assert import_copy(root)["state"] == "compiled"  # the copy as it was built loads compiled
    assemble = root / "gateway" / "core" / "assemble.py"
    assemble.write_text(assemble.read_text() + "\n# edited after the build\n")
    report = import_copy(root)
    assert report["state"] == (
        "interpreted (stale build: gateway.core.assemble changed since the build; run scripts/compile.py)"
    )
    files = report["files"]
    assert isinstance(files, dict)
    assert sorted(files) == sorted(compiled.COMPILED_MODULES)
    assert all(str(path).endswith(".py") for path in files.values())


def test_a_module_the_build_compiled_but_the_list_no_longer_names_is_imported_from_source(tmp_path: Path) -> None:
    root = copy_package(tmp_path)
    gone = "gateway.http.sse"
    sources = {m: compiled.source_hash(compiled.source_path(m)) for m in (*compiled.COMPILED_MODULES, gone)}
    (root / "gateway" / "_compiled.json").write_text(json.dumps({"suffix": SUFFIX, "sources": sources}))
    (root / (gone.replace(".", "/") + SUFFIX)).write_bytes(b"")  # would fail to load
    script = "import gateway, gateway.http.sse as m, gateway.compiled as c; print(c.STATE); print(m.__file__)"
    state, path = run_in_copy(root, script).splitlines()
    assert state.startswith("interpreted (stale build: it compiled another list of modules")
    assert path.endswith("gateway/http/sse.py")
