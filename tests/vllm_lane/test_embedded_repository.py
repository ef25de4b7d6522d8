"""A repository built for NVIDIA's vLLM container works with ``--embedded`` unchanged: its
``config.pbtxt`` names no inputs or outputs (the backend's ``auto_complete_config`` declares them),
``model.json`` names a hub id (the backend's own sample layout), and nothing arranges the stub's
locale but the launcher. Starts its own embedded gateway (a third engine, about a minute)."""

from __future__ import annotations

import openai

from tests.hf_cache import put_in_hub_cache
from tests.vllm_lane import lane
from tests.vllm_lane.compare import messages


def test_nvidia_style_repository_serves_chat_embedded(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cache = tmp_path / "hf" / "hub"
    put_in_hub_cache(cache, "acme/tiny-llm", lane.WEIGHTS)
    repository = lane.build_repository(tmp_path / "repository", model="acme/tiny-llm", adapters=None)
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    gateway = lane.spawn_embedded_gateway(repository, tmp_path / "gateway.log", env)
    try:
        gateway.wait_ready("/health/ready", 300)
        with openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=120) as sdk:
            request = {"model": lane.MODEL, "messages": messages("Hello there"), "max_tokens": 8, "temperature": 0}
            reply = sdk.chat.completions.create(**request)  # a 400 if the hub id's template were not found
            streamed = "".join(
                chunk.choices[0].delta.content or ""
                for chunk in sdk.chat.completions.create(**request, stream=True)
                if chunk.choices
            )
            served = {m.id: m for m in sdk.models.list().data}
        assert reply.choices[0].finish_reason in ("length", "stop") and reply.usage is not None
        assert 0 < reply.usage.completion_tokens <= 8 and reply.usage.prompt_tokens > 0
        assert streamed == reply.choices[0].message.content  # greedy: the same tokens either way
        assert (served[lane.MODEL].model_extra or {}).get("max_model_len") == lane.MAX_MODEL_LEN
        assert "names the tokenizer" not in gateway.log.read_text()
    finally:
        gateway.stop()
