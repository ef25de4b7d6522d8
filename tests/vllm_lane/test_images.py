"""Images through Triton's real vLLM backend, against vLLM's own server: the same chat request
with an image (a data: URL) gives the same tokens and logprobs on both sides, so the gateway's
prompt, its ``image`` tensor and the backend's decoding agree with what vLLM's server does.

Its own servers (a tiny BLIP-2 is another model: another engine on each side), loaded side by
side like the lane's; the module is skipped with the lane's reasons.
"""

from __future__ import annotations

import base64
import io
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from PIL import Image

from tests.vllm_lane import lane as processes
from tests.vllm_lane.conftest import LaneUrls, _timings
from tests.vllm_lane.vision import build_tiny_blip2

MODEL = "tiny-blip2"
ENGINE_ARGS = {"dtype": "float32", "enforce_eager": True, "max_model_len": 512, "seed": 0}
GREEDY: dict[str, Any] = {"temperature": 0, "max_tokens": 8, "logprobs": True, "top_logprobs": 2}


@pytest.fixture(scope="module")
def vision(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LaneUrls]:
    if not (processes.PEER / "model.py").is_file():
        why = f"Triton's vLLM backend is not at {processes.PEER}"
        if os.environ.get("GATEWAY_REQUIRE_PEERS") == "1":
            pytest.fail(f"{why}, and GATEWAY_REQUIRE_PEERS=1 requires it")
        pytest.skip(why)
    workdir: Path = tmp_path_factory.mktemp("vllm-lane-images")
    weights = build_tiny_blip2(workdir / "tiny-blip2")
    repository = workdir / "repository"
    version = repository / MODEL / "1"
    version.mkdir(parents=True)
    (repository / MODEL / "config.pbtxt").write_text(processes.CONFIG_PBTXT)
    (version / "model.py").symlink_to(processes.PEER / "model.py")
    (version / "utils").symlink_to(processes.PEER / "utils", target_is_directory=True)
    (version / "model.json").write_text(json.dumps({"model": str(weights), **ENGINE_ARGS}))
    started = time.monotonic()
    flags = ["--dtype", "float32", "--enforce-eager", "--max-model-len", "512", "--seed", "0"]
    vllm = processes._spawn(
        "vllm",
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(weights)]
        + ["--served-model-name", MODEL, "--host", "127.0.0.1", *flags],
        workdir / "vllm.log",
        processes.ENGINE_ENV,
    )
    triton = gateway = None
    try:
        triton = processes.start_triton(repository, workdir)
        # BLIP-2's processor puts the image in front of the prompt itself: no placeholder text,
        # as vLLM's server writes none for it.
        files = {MODEL: {"image_placeholder": ""}}
        gateway = processes._spawn(
            "gateway",
            [sys.executable, "-m", "gateway", "--triton-url", triton.grpc_url, "--model-repository", str(repository)],
            workdir / "gateway.log",
            {"GATEWAY_MODEL_FILES": json.dumps(files)},
        )
        gateway.wait_ready("/health/ready", 60)
        vllm.wait_ready("/v1/models", 300)
        _timings.append(f"vllm lane images: both BLIP-2 engines ready in {time.monotonic() - started:.0f}s")
        yield LaneUrls(gateway.url, vllm.url)
    finally:
        if gateway is not None:
            gateway.stop()
        if triton is not None:
            triton.stop(grace=30.0)
        vllm.stop()


def data_url(color: tuple[int, int, int], size: tuple[int, int]) -> str:
    image = Image.new("RGB", size, color)
    for x in range(size[0]):
        image.putpixel((x, x % size[1]), (255 - color[0], color[2], color[1]))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def ask(url: str, image: str, stream: bool = False) -> tuple[str, Any, Any]:
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in the picture?"},
                {"type": "image_url", "image_url": {"url": image}},
            ],
        }
    ]
    with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120) as sdk:
        if stream:
            chunks = sdk.chat.completions.create(model=MODEL, messages=messages, stream=True, **GREEDY)  # type: ignore[arg-type]
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            return text, None, None
        answer = sdk.chat.completions.create(model=MODEL, messages=messages, **GREEDY)  # type: ignore[arg-type]
    choice = answer.choices[0]
    logprobs = [(t.token, round(t.logprob, 4)) for t in (choice.logprobs.content or [])] if choice.logprobs else None
    usage = answer.usage
    return choice.message.content or "", logprobs, (usage.prompt_tokens, usage.completion_tokens) if usage else None


IMAGES = [data_url((200, 30, 90), (40, 30)), data_url((10, 220, 40), (17, 61))]


@pytest.mark.parametrize("image", IMAGES, ids=["red", "green"])
def test_an_image_gives_the_same_answer_on_both(vision: LaneUrls, image: str) -> None:
    ours, theirs = ask(vision.gateway, image), ask(vision.vllm, image)
    assert ours == theirs
    assert ours[2] is not None and ours[2][1] == GREEDY["max_tokens"]


def test_the_image_changes_the_answer_and_streams_the_same(vision: LaneUrls) -> None:
    red, green = (ask(vision.gateway, image) for image in IMAGES)
    assert red[1] != green[1]  # the pixels reached the engine: the logprobs differ
    assert ask(vision.gateway, IMAGES[0], stream=True)[0] == red[0] == ask(vision.vllm, IMAGES[0], stream=True)[0]


def test_a_text_model_on_the_vllm_backend_refuses_an_image_naming_the_part(lane: LaneUrls) -> None:
    """Triton's vLLM backend declares its ``image`` input on the text-only tiny-llm too; the
    gateway reads the weights' config (no ``vision_config``) and refuses before Triton is asked,
    where vLLM's own server refuses too."""
    body = {
        "model": processes.MODEL,
        "max_tokens": 4,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in the picture?"},
                    {"type": "image_url", "image_url": {"url": IMAGES[0]}},
                ],
            }
        ],
    }
    ours = httpx.post(lane.gateway + "/v1/chat/completions", json=body, timeout=60)
    assert ours.status_code == 400
    error = ours.json()["error"]
    assert error["param"] == "messages.0.content.1" and "does not take images" in error["message"]
    theirs = httpx.post(lane.vllm + "/v1/chat/completions", json=body, timeout=60)
    assert theirs.status_code == 400
