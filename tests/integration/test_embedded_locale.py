"""Python-backend models under the launcher's Triton run in a UTF-8 locale, as in NVIDIA's container.

Triton 2.51's stub starts an isolated interpreter in the C locale whatever the environment says, so
without the launcher's help ``open()`` decodes ASCII and importing torch's inductor (vLLM does)
fails to load the model. The models live in ``tests/triton_models_locale``.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.triton_launcher import TritonServer, check_stub_numpy, make_stub_python
from tests.integration.conftest import ROOT, stop_in_background

LOCALE_REPOSITORY = ROOT / "tests" / "triton_models_locale"


@pytest.fixture(scope="module")
def locale_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    log = tmp_path_factory.mktemp("triton-locale") / "tritonserver.log"
    # LANG/LC_ALL as a user's shell would set them: the stub ignores them, which is the point.
    server = TritonServer(LOCALE_REPOSITORY, log_file=log, extra_env={"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"})
    server.start()
    yield server
    stop_in_background(server)


def _infer(server: TritonServer, model: str) -> str:
    body = json.dumps({"inputs": [{"name": "QUERY", "shape": [1], "datatype": "BYTES", "data": ["?"]}]}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.http_port}/v2/models/{model}/infer", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return str(json.loads(response.read())["outputs"][0]["data"][0])


def test_stub_opens_text_as_utf8_and_prints_non_ascii(locale_triton: TritonServer) -> None:
    report: dict[str, Any] = json.loads(_infer(locale_triton, "locale_probe"))
    assert report["isolated"] == 1  # still Triton's own isolated stub, not some other interpreter
    assert report["preferred_encoding"] == "UTF-8", report
    assert report["lc_ctype"].lower().replace("-", "").endswith("utf8"), report
    assert report["utf8_text"] == "héllo → wörld ✓", report
    assert report["stdout_encoding"] == "utf-8", report  # its print("✓") did not fail the load
    assert "locale_probe: ✓" in locale_triton.log_file.read_text(encoding="utf-8")  # type: ignore[union-attr]


def test_model_importing_torch_inductor_loads(locale_triton: TritonServer) -> None:
    assert _infer(locale_triton, "inductor_import") == "imported"


def test_the_real_stub_interpreter_passes_the_numpy_check(tmp_path: Path) -> None:
    """The probe runs through the launcher's stub environment (isolated, like the stub) and sees
    this environment's numpy, which the embedded stack (the local extra) pins below 2."""
    import numpy

    assert int(numpy.__version__.split(".")[0]) < 2
    check_stub_numpy(make_stub_python(tmp_path / "stub"))
