"""Chat templates: render a conversation into the prompt text the model was trained on.

The gateway renders templates itself (jinja2 only, no transformers at run time) and must produce
exactly what ``transformers``' ``apply_chat_template`` would: same sandboxed environment, same
whitespace options, same globals (``raise_exception``, ``strftime_now``), same ``tojson`` filter,
the tokenizer's named special tokens (``bos_token``, ``eos_token``, ...) as variables, as
transformers 5 passes them (extra special tokens are not passed). A unit test compares the two on the shipped model.

Loading reads files, so it happens once per model when the catalog is built, not per request.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from gateway.errors import InvalidRequestError

_SPECIAL_TOKEN_KEYS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)


class TemplateError(InvalidRequestError):
    """The chat template refused the conversation (its own ``raise_exception``)."""


class _GenerationTag(jinja2.ext.Extension):
    """Accept ``{% generation %}...{% endgeneration %}`` (used by some HF templates to mark
    assistant tokens for training masks): renders the body unchanged."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def _raise_exception(message: str) -> None:
    raise TemplateError(f"the model's chat template rejected the messages: {message}", param="messages")


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:  # noqa: A002 - the name templates use
    return datetime.now().strftime(format)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def _token_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    content = value.get("content") if isinstance(value, Mapping) else None
    return content if isinstance(content, str) else None


class ChatTemplate:
    """A compiled chat template plus the special-token variables it may use."""

    def __init__(self, source: str, special_tokens: Mapping[str, Any] | None = None) -> None:
        self.source = source
        """The template's text: its markers tell which tool-call format the model was trained on."""
        template = _environment().from_string(source)
        # jinja keeps a template's globals as a ChainMap over its environment's, which every render
        # copies key by key in Python (about half of a render, hot). Nothing changes either after
        # loading, so the template gets a plain dict of the same globals.
        template.globals = dict(template.globals)
        self._template = template
        self.loops_over_content = _loops_over_content(source)
        """The template iterates a message's ``content`` (HF multimodal style): a message with
        images reaches it as a list of parts, ``{"type": "image"}`` where each image was."""
        self._special_tokens = dict(special_tokens or {})

    @classmethod
    def from_directory(cls, directory: Path | None, template_file: Path | None = None) -> ChatTemplate | None:
        """Read a Hugging Face tokenizer directory: ``chat_template.jinja`` (transformers 5) or
        ``tokenizer_config.json``'s ``chat_template`` (older saves). None if it has neither.
        ``template_file`` (a per-model override) replaces the directory's template; the special
        tokens still come from the directory, when there is one."""
        config: dict[str, Any] = {}
        config_path = directory / "tokenizer_config.json" if directory is not None else None
        if config_path is not None and config_path.is_file():
            config = json.loads(config_path.read_text(encoding="utf-8"))
        source: str | None = None
        jinja_path = template_file or (directory / "chat_template.jinja" if directory is not None else None)
        if jinja_path is not None and jinja_path.is_file():
            source = jinja_path.read_text(encoding="utf-8")
        elif template_file is None:
            source = _template_from_config(config.get("chat_template"))
        if source is None:
            return None
        tokens: dict[str, Any] = {}
        map_path = directory / "special_tokens_map.json" if directory is not None else None
        if map_path is not None and map_path.is_file():
            tokens.update(json.loads(map_path.read_text(encoding="utf-8")))
        tokens.update({k: config[k] for k in _SPECIAL_TOKEN_KEYS if config.get(k) is not None})
        special = {k: _token_text(tokens.get(k)) for k in _SPECIAL_TOKEN_KEYS if _token_text(tokens.get(k))}
        return cls(source, special)

    @staticmethod
    def for_client(source: str) -> ChatTemplate:
        """A client's own template for a model that has none (no special tokens known)."""
        return _client_template(source, ())

    def with_source(self, source: str) -> ChatTemplate:
        """Another template (a client's own, where allowed) with this model's special tokens.
        Compiled templates are cached by their text: a client sends the same one again and again."""
        return _client_template(source, tuple(self._special_tokens.items()))

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
        extra: Mapping[str, Any] | None = None,
        documents: Sequence[Mapping[str, str]] | None = None,
        continue_final_message: bool = False,
    ) -> str:
        """``continue_final_message``: the last message is left open for the model to go on with
        (a prefilled answer): rendered with its text marked, then cut where its text ends, so
        whatever the template closes a message with (an end-of-turn token, a newline) is left
        out, as transformers does it."""
        if continue_final_message:
            messages = _mark_final_message(messages)
        variables: dict[str, Any] = dict(self._special_tokens)
        variables.update(extra or {})
        variables.update(
            messages=list(messages), tools=tools, documents=documents, add_generation_prompt=add_generation_prompt
        )
        try:
            rendered = self._template.render(**variables)
        except TemplateError:
            raise
        except jinja2.TemplateError as exc:
            raise InvalidRequestError(f"the chat template failed on these messages: {exc}", param="messages") from exc
        return _cut_at_marker(rendered) if continue_final_message else rendered


def _loops_over_content(source: str) -> bool:
    """Whether a ``{% for ... in <x>['content'] %}`` (or ``<x>.content``) is in the template, as
    vLLM's ``auto`` content format detects it: such a template takes content as a list of parts."""
    try:
        tree = _environment().parse(source)
    except jinja2.TemplateSyntaxError:
        return False
    for loop in tree.find_all(jinja2.nodes.For):
        target = loop.iter
        while isinstance(target, jinja2.nodes.Filter) and target.node is not None:
            target = target.node
        if isinstance(target, jinja2.nodes.Getattr) and target.attr == "content":
            return True
        if (
            isinstance(target, jinja2.nodes.Getitem)
            and isinstance(target.arg, jinja2.nodes.Const)
            and target.arg.value == "content"
        ):
            return True
    return False


_CONTINUE_MARKER = "\u241fgateway-continue\u241f "
"""Put after the final message's text to find where it ends once rendered. The trailing space
tells whether the template trims messages (then the text's own trailing space is trimmed too)."""


def _mark_final_message(messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    if not messages or not isinstance(messages[-1].get("content"), str):
        raise InvalidRequestError(
            "continue_final_message needs a final message with text content to continue",
            param="continue_final_message",
        )
    final = messages[-1]
    return [*messages[:-1], {**final, "content": final["content"] + _CONTINUE_MARKER}]


def _cut_at_marker(rendered: str) -> str:
    at = rendered.rfind(_CONTINUE_MARKER.rstrip())
    if at < 0:
        raise InvalidRequestError(
            "continue_final_message is set but the chat template does not render the final message's text, "
            "so it cannot be continued",
            param="continue_final_message",
        )
    if rendered.startswith(_CONTINUE_MARKER, at):
        return rendered[:at]
    return rendered[:at].rstrip()


@functools.lru_cache(maxsize=32)
def _client_template(source: str, special_tokens: tuple[tuple[str, Any], ...]) -> ChatTemplate:
    try:
        return ChatTemplate(source, dict(special_tokens))
    except jinja2.TemplateSyntaxError as exc:
        raise InvalidRequestError(f"the chat template does not compile: {exc}", param="chat_template") from exc


def _template_from_config(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # named templates: [{"name": "default", "template": "..."}]
        named = {item.get("name"): item.get("template") for item in value if isinstance(item, Mapping)}
        default = named.get("default")
        return default if isinstance(default, str) else None
    return None
