"""The startup hint names a model that is served, in a command that works as printed."""

from __future__ import annotations

import json
import shlex

from gateway.models.catalog import ServedModel
from gateway.models.templates import ChatTemplate
from gateway.server import client_host, try_hint

TEMPLATE = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}")
TEXT = frozenset({"text_input", "sampling_parameters"})


def _curl_body(hint: str) -> tuple[str, dict[str, object]]:
    argv = shlex.split(hint.removeprefix("try: "))
    return argv[2], json.loads(argv[argv.index("-d") + 1])


def test_hint_names_a_chat_model_triton_serves_not_a_fixed_name() -> None:
    models = [
        ServedModel("zeta-chat", template=TEMPLATE, inputs=TEXT),
        ServedModel("alpha-raw", inputs=TEXT),
        ServedModel("beta", template=TEMPLATE, inputs=TEXT),
        ServedModel("aardvark-embedder", template=TEMPLATE, inputs=frozenset({"INPUT_IDS"})),
    ]
    url, body = _curl_body(try_hint("http://127.0.0.1:8000", models))
    assert url == "http://127.0.0.1:8000/v1/chat/completions"
    assert body["model"] == "beta"
    assert body["messages"] == [{"role": "user", "content": "Hi"}]


def test_hint_without_any_chat_template_uses_plain_completions() -> None:
    url, body = _curl_body(
        try_hint("http://h:1", [ServedModel("scripted", inputs=TEXT), ServedModel("firehose", inputs=TEXT)])
    )
    assert url == "http://h:1/v1/completions"
    assert body["model"] == "firehose" and body["prompt"] == "Hi"


def test_hint_with_no_text_model_ready_says_so_without_a_command() -> None:
    for models in ([], [ServedModel("locale_probe", inputs=frozenset({"QUERY"}))]):
        hint = try_hint("http://h:1", models)
        assert "no text-generation model is ready" in hint and "curl" not in hint


def test_client_host_turns_wildcard_binds_into_loopback() -> None:
    assert client_host("0.0.0.0") == "127.0.0.1"
    assert client_host("::") == "[::1]"
    assert client_host("fd00::5") == "[fd00::5]"
    assert client_host("10.0.0.7") == "10.0.0.7"
