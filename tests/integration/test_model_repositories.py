"""Model repositories as Triton's vLLM backend reads them, end to end: an embedded gateway serves
models whose ``model.json`` names a hub id (in a Hugging Face cache the test builds) and a path
relative to Triton's working directory, and chat renders each one's own template.

The models are ``scripted`` (tests/triton_models) under other names: with ``echo_inputs`` it sends
back the ``text_input`` it received, which is the prompt the gateway rendered.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest

from gateway.models.templates import ChatTemplate
from gateway.triton_launcher import free_port
from tests.hf_cache import put_in_hub_cache
from tests.integration.conftest import ROOT, TEST_REPOSITORY, answers_ok, wait_for

WEIGHTS = ROOT / "triton_models" / "weights" / "tiny-llm"
DECOY = "DECOY {% for m in messages %}{{ m['content'] }}{% endfor %}"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": '{"echo_inputs": true}'}]


@dataclass(frozen=True)
class Embedded:
    url: str
    pid: int
    triton_cwd: Path


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _scripted_model(repository: Path, name: str, engine: dict[str, object]) -> Path:
    """The scripted model under ``name``, with this ``model.json``; returns its version folder."""
    version = repository / name / "1"
    version.mkdir(parents=True)
    (repository / name / "config.pbtxt").write_text((TEST_REPOSITORY / "scripted" / "config.pbtxt").read_text())
    for source in ("model.py", "replay.py"):
        (version / source).symlink_to(TEST_REPOSITORY / "scripted" / "1" / source)
    (version / "model.json").write_text(json.dumps({**engine, "max_model_len": 1000000}))
    return version


def _decoy_tokenizer(where: Path) -> None:
    """A tokenizer folder whose template the gateway must *not* use."""
    where.mkdir(parents=True)
    (where / "tokenizer_config.json").write_text(json.dumps({"chat_template": DECOY}))


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Embedded]:
    tmp_path = tmp_path_factory.mktemp("repositories")
    repository, cwd, cache = tmp_path / "repository", tmp_path / "triton-cwd", tmp_path / "hf" / "hub"
    put_in_hub_cache(cache, "acme/tiny-chat", WEIGHTS)
    _scripted_model(repository, "hubbed", {"model": "acme/tiny-chat"})
    # A path relative to Triton's working directory (where vLLM would look), with a decoy of the
    # same relative path beside model.json (where the gateway used to look).
    version = _scripted_model(repository, "relative", {"model": "weights/tiny-llm"})
    (cwd / "weights").mkdir(parents=True)
    (cwd / "weights" / "tiny-llm").symlink_to(WEIGHTS, target_is_directory=True)
    _decoy_tokenizer(version / "weights" / "tiny-llm")
    port, log = free_port(), tmp_path / "gateway.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env["HF_HOME"] = str(tmp_path / "hf")  # the default cache is then <HF_HOME>/hub
    command = [sys.executable, "-m", "gateway", "--embedded", "--port", str(port)]
    command += ["--model-repository", str(repository), "--triton-log-file", str(tmp_path / "triton.log")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    with open(log, "wb") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, cwd=cwd, env=env)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:  # or exited: no use waiting then
        return answers_ok(url + "/health/ready") or process.poll() is not None

    try:
        assert wait_for(ready, timeout=90, interval=0.3) and process.poll() is None, log.read_text()
        yield Embedded(url, process.pid, cwd)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, log.read_text()
    assert "names the tokenizer" not in log.read_text()  # both were found: no warning


@pytest.mark.parametrize("model", ["hubbed", "relative"])
def test_chat_uses_the_template_the_backend_would_load(embedded: Embedded, model: str) -> None:
    expected = ChatTemplate.from_directory(WEIGHTS)
    assert expected is not None
    with openai.OpenAI(base_url=embedded.url + "/v1", api_key="unused", max_retries=0, timeout=60) as sdk:
        reply = sdk.chat.completions.create(model=model, messages=MESSAGES)  # type: ignore[arg-type]
    echoed = json.loads(reply.choices[0].message.content or "")
    assert echoed["text_input"] == expected.render(MESSAGES)
    assert "DECOY" not in echoed["text_input"]


def test_triton_and_its_stubs_run_in_the_working_directory_the_gateway_assumes(embedded: Embedded) -> None:
    """Why relative paths resolve there: the backend's model.py runs in a stub process, and vLLM
    opens a relative path against that process's working directory, which is Triton's."""
    (triton,) = _children(embedded.pid)
    stubs = _children(triton)
    assert len(stubs) == 2  # one per model
    for pid in (triton, *stubs):
        assert Path(os.readlink(f"/proc/{pid}/cwd")) == embedded.triton_cwd
