"""Bad input the OpenAPI document cannot describe: the request fields typed ``dict``/``Any`` there
(content parts, tool schemas, tool choices, response formats, images, Anthropic's content blocks,
Responses input items, token ids) generated from hypothesis strategies that stay close to what
clients really send, then break it: wrong types, nesting, huge or recursive schemas, images whose
bytes lie. Every answer: no 5xx, an OpenAI-shaped error (Anthropic's on ``/v1/messages*``), a
stream that ends as its API ends one. The strategies are shared with the Triton fuzz
(tests/integration/test_fuzz_triton.py)."""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.test_fuzz import EMBED, MODEL, Gateways, assert_answer, fuzz_settings, json_values, start_gateways
from tests.unit.test_images import declared_png, encoded


@pytest.fixture(scope="module")
def gateways(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateways]:
    yield from start_gateways(tmp_path_factory.mktemp("fuzz-bodies"))


def mostly(valid: st.SearchStrategy[Any], broken: st.SearchStrategy[Any], odds: int = 10) -> st.SearchStrategy[Any]:
    """``valid`` but one time in ``odds + 1``: a case breaks a few things at a time, so most of
    its parts pass and the broken one reaches the code behind the parts that pass."""
    return st.integers(0, odds).flatmap(lambda roll: broken if roll == odds else valid)


# -- images ----------------------------------------------------------------------------------------


def declared_jpeg(width: int, height: int) -> bytes:
    """A JPEG whose frame header (SOF0) claims ``width`` x ``height``."""
    small = encoded(8, 8, "JPEG")
    at = small.index(b"\xff\xc0") + 5
    return small[:at] + struct.pack(">HH", min(height, 65535), min(width, 65535)) + small[at + 4 :]


PNG = encoded(2, 2, "PNG")
JPEG = encoded(2, 2, "JPEG")
GIF = encoded(2, 2, "GIF")
WEBP = encoded(2, 2, "WEBP")
VALID_IMAGES = [PNG, JPEG, GIF, WEBP]

image_bytes = st.one_of(
    st.sampled_from(VALID_IMAGES),
    st.sampled_from(
        [declared_png(100_000, 100_000), declared_png(0, 0), declared_png(2**31 - 1, 1), declared_jpeg(65535, 65535)]
    ),
    st.builds(lambda image, cut: image[:cut], st.sampled_from(VALID_IMAGES), st.integers(0, 64)),  # truncated
    st.builds(lambda image, junk: image[:24] + junk, st.sampled_from(VALID_IMAGES), st.binary(max_size=64)),
    st.binary(max_size=128),
)
MIME = st.sampled_from(["image/png", "image/jpeg", "image/gif", "image/webp", "image/svg+xml", "text/plain", "", "x"])


@st.composite
def data_urls(draw: st.DrawFn) -> str:
    data = base64.b64encode(draw(image_bytes)).decode()
    form = draw(st.integers(0, 5))
    mime = draw(MIME)
    if form == 0:
        return f"data:{mime};base64,{data}"
    if form == 1:
        return f"data:{mime},{data}"  # not base64
    if form == 2:
        return f"data:{mime};base64,{data[: max(0, len(data) - draw(st.integers(1, 3)))]}"  # padding cut
    if form == 3:
        return f"data:{mime};base64,{draw(st.text(max_size=40))}"  # not base64 at all
    if form == 4:
        return f"data:;base64,{data}"
    return f"DATA:{mime.upper()};BASE64,{' '.join(data[i : i + 8] for i in range(0, len(data), 8))}"


WEIRD_URLS = [
    "http://127.0.0.1/a.png",  # an allowed host on a private address: refused before connecting
    "http://127.0.0.1:0/a.png",
    "http://127.0.0.1:99999/a.png",
    "http://a.example/a.png",  # allowed, never resolves
    "https://a.example:443/%zz",
    "http://xn--/a.png",
    "http://xn--a.example/",
    "http://.example/",
    "http://a..example/",
    "http://" + "a" * 64 + ".example/",
    "http://" + "a." * 130 + "example/",
    "http://\u3002example/",
    "http://\udcff.example/",
    "http://a\u0000.example/",
    "http://[::1/",
    "http://[::1]/a.png",
    "http://user:pass@127.0.0.1/",
    "https://images.example.com/a.png",  # not an allowed host
    "file:///etc/passwd",
    "ftp://127.0.0.1/a.png",
    "//127.0.0.1/a.png",
    "http:///a.png",
    "http://",
    "",
]
valid_data_urls = st.sampled_from(VALID_IMAGES).map(
    lambda image: "data:image/png;base64," + base64.b64encode(image).decode()
)
bad_image_urls = st.one_of(
    data_urls(),
    st.sampled_from(WEIRD_URLS),
    st.builds(lambda host: f"http://{host}.example/x.png", st.text(max_size=12)),
    st.builds(lambda rest: f"http://127.0.0.1/{rest}", st.text(max_size=12)),
)
image_urls = mostly(valid_data_urls, bad_image_urls, odds=2)

# -- content parts -------------------------------------------------------------------------------

short_text = st.text(max_size=30)
texts = mostly(short_text, json_values)


def content_parts(depth: int = 2) -> st.SearchStrategy[Any]:
    text_part = st.fixed_dictionaries({"type": st.just("text"), "text": texts})
    image_part = st.fixed_dictionaries(
        {"type": st.just("image_url"), "image_url": st.fixed_dictionaries({"url": image_urls})}
    )
    odd = st.one_of(
        st.fixed_dictionaries({"type": st.just("text"), "text": json_values}),
        st.fixed_dictionaries(
            {"type": st.just("image_url"), "image_url": st.fixed_dictionaries({"url": image_urls})},
            optional={"detail": st.sampled_from(["auto", "low", "high", "x"])},
        ),
        st.fixed_dictionaries({"type": st.just("image_url"), "image_url": image_urls | json_values}),
        st.fixed_dictionaries(
            {
                "type": st.just("input_audio"),
                "input_audio": st.fixed_dictionaries(
                    {"data": st.binary(max_size=32).map(lambda b: base64.b64encode(b).decode()) | json_values},
                    optional={"format": st.sampled_from(["wav", "mp3", "flac", "x"])},
                ),
            }
        ),
        st.fixed_dictionaries(
            {
                "type": st.just("file"),
                "file": st.fixed_dictionaries(
                    {}, optional={"file_data": data_urls(), "filename": short_text, "file_id": short_text}
                ),
            }
        ),
        st.fixed_dictionaries(
            {"type": st.sampled_from(["refusal", "video_url", "audio_url", "input_text", "x"])},
            optional={"text": short_text, "refusal": short_text},
        ),
        json_values,
    )
    part = mostly(
        text_part | image_part, odd | (st.lists(content_parts(depth - 1), max_size=3) if depth else odd), odds=3
    )
    return part


message_content = mostly(short_text | st.lists(content_parts(), min_size=1, max_size=3), json_values | st.just([]))

# -- JSON Schemas (tools, response formats) ----------------------------------------------------------

TYPES = ["object", "string", "integer", "number", "boolean", "array", "null", "nonsense"]


def schema_nodes(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    keys = st.text(min_size=1, max_size=8)
    return st.one_of(
        st.fixed_dictionaries(
            {"type": st.just("object"), "properties": st.dictionaries(keys, children, max_size=4)},
            optional={
                "required": st.lists(keys, max_size=3),
                "additionalProperties": st.booleans() | children,
                "minProperties": st.integers(-1, 5),
                "patternProperties": st.dictionaries(st.sampled_from(["^a", "(", "[", ".*"]), children, max_size=2),
            },
        ),
        st.fixed_dictionaries(
            {"type": st.just("array"), "items": children},
            optional={
                "minItems": st.integers(-1, 10**6),
                "maxItems": st.integers(-1, 5),
                "prefixItems": st.lists(children, max_size=2),
            },
        ),
        st.fixed_dictionaries(
            {"type": st.just("string")},
            optional={
                "pattern": st.sampled_from(["^[a-z]+$", "(", "a{2,1}", "\\", "[", "(?P<x>a)(?P=x)", ".*"]) | short_text,
                "minLength": st.integers(-1, 10**6),
                "maxLength": st.integers(-1, 5),
                "format": st.sampled_from(["date-time", "email", "uuid", "ipv4", "x"]),
            },
        ),
        st.fixed_dictionaries(
            {"type": st.sampled_from(["integer", "number"])},
            optional={
                "minimum": st.integers(-(2**70), 2**70) | st.floats(allow_nan=False),
                "maximum": st.integers(-(2**70), 2**70) | st.floats(allow_nan=False),
                "multipleOf": st.sampled_from([0, -1, 0.1, 3]),
            },
        ),
        st.fixed_dictionaries({"enum": st.lists(json_values, max_size=6)}),
        st.builds(lambda n: {"type": "string", "enum": [f"v{i}" for i in range(n)]}, st.sampled_from([0, 1, 5000])),
        st.builds(lambda n: {"type": "integer", "enum": list(range(n))}, st.sampled_from([2000])),
        st.fixed_dictionaries({"const": json_values}),
        st.sampled_from(["anyOf", "oneOf", "allOf"]).flatmap(
            lambda word: st.fixed_dictionaries({word: st.lists(children, max_size=3)})
        ),
        st.fixed_dictionaries({"type": st.lists(st.sampled_from(TYPES), max_size=3) | st.sampled_from(TYPES)}),
        st.fixed_dictionaries({"not": children}),
        st.sampled_from(
            [{"$ref": "#"}, {"$ref": "#/$defs/node"}, {"$ref": "#/definitions/missing"}, {"$ref": "http://x/"}]
        ),
        st.sampled_from([True, False, {}, [], "string", 3]),
    )


json_schemas = st.recursive(st.sampled_from([{"type": t} for t in TYPES]), schema_nodes, max_leaves=10)

RECURSIVE = {
    "type": "object",
    "$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}, "v": {"type": "integer"}}}},
    "properties": {"head": {"$ref": "#/$defs/node"}},
}
SELF = {"type": "object", "properties": {"me": {"$ref": "#"}}, "required": ["me"]}
MUTUAL = {
    "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
    "type": "object",
    "properties": {"x": {"$ref": "#/$defs/a"}},
}
SIMPLE = {
    "type": "object",
    "properties": {"city": {"type": "string", "enum": ["Paris", "Tokyo"]}},
    "required": ["city"],
}
top_schemas = mostly(
    st.just(SIMPLE) | json_schemas.filter(lambda s: isinstance(s, dict)),
    st.one_of(
        json_schemas,
        st.sampled_from([RECURSIVE, SELF, MUTUAL]),
        st.builds(
            lambda s, defs: {**(s if isinstance(s, dict) else {}), "$defs": {"node": defs}}, json_schemas, json_schemas
        ),
    ),
    odds=2,
)

tool_names = mostly(
    st.sampled_from(["get_weather", "f"]), st.sampled_from(["a" * 65, ""]) | st.text(max_size=12) | json_values
)


@st.composite
def chat_tools(draw: st.DrawFn) -> Any:
    form = draw(st.integers(0, 7))
    if form == 7:
        return draw(json_values)
    function: dict[str, Any] = {"name": draw(tool_names)}
    if draw(st.booleans()):
        function["parameters"] = draw(top_schemas)
    if draw(st.booleans()):
        function["strict"] = draw(st.booleans() | json_values)
    if draw(st.booleans()):
        function["description"] = draw(short_text)
    tools = [{"type": draw(mostly(st.just("function"), st.sampled_from(["custom", "x"]))), "function": function}]
    return tools * draw(st.integers(1, 2)) if form == 1 else tools  # form 1: the same name twice


chat_tool_choice = mostly(
    st.sampled_from(["auto", "none", "required"])
    | st.fixed_dictionaries(
        {"type": st.just("function"), "function": st.fixed_dictionaries({"name": st.just("get_weather")})}
    ),
    st.one_of(
        st.sampled_from(["any", ""]),
        st.fixed_dictionaries({"type": st.just("function"), "function": st.fixed_dictionaries({"name": tool_names})}),
        st.fixed_dictionaries({"type": st.just("function"), "name": tool_names}),
        st.fixed_dictionaries(
            {"type": st.sampled_from(["allowed_tools", "custom", "x"])}, optional={"mode": short_text}
        ),
        json_values,
    ),
)
response_formats = mostly(
    st.fixed_dictionaries(
        {
            "type": st.just("json_schema"),
            "json_schema": st.fixed_dictionaries(
                {"name": tool_names, "schema": top_schemas}, optional={"strict": st.booleans()}
            ),
        }
    )
    | st.sampled_from([{"type": "json_object"}, {"type": "text"}]),
    st.fixed_dictionaries({"type": st.just("json_schema"), "json_schema": json_values})
    | st.fixed_dictionaries({"type": st.sampled_from(["regex", "grammar", "x"])})
    | json_values,
    odds=4,
)

# -- chat bodies ----------------------------------------------------------------------------------

roles = mostly(
    st.sampled_from(["user", "assistant", "system", "developer"]), st.sampled_from(["tool", "function", "x"])
)


@st.composite
def chat_messages(draw: st.DrawFn) -> list[Any]:
    messages: list[Any] = []
    for _ in range(draw(st.integers(1, 4))):
        message: dict[str, Any] = {"role": draw(roles), "content": draw(message_content)}
        if message["role"] == "assistant" and draw(st.integers(0, 3)) == 0:
            message["tool_calls"] = [
                {
                    "id": draw(mostly(st.just("call_1"), short_text)),
                    "type": "function",
                    "function": {
                        "name": draw(tool_names),
                        "arguments": draw(mostly(st.just('{"city": "Paris"}'), texts)),
                    },
                }
            ]
        if message["role"] == "tool":
            message["tool_call_id"] = draw(mostly(st.just("call_1"), texts))
        messages.append(message)
    if draw(mostly(st.just(False), st.just(True))):
        messages.append(draw(json_values))
    return messages


@st.composite
def chat_bodies(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {"model": MODEL, "messages": draw(chat_messages()), "max_tokens": draw(st.integers(1, 4))}
    if draw(st.booleans()):
        body["tools"] = draw(chat_tools())
        if draw(st.booleans()):
            body["tool_choice"] = draw(chat_tool_choice)
    elif draw(mostly(st.just(False), st.just(True))):
        body["tool_choice"] = draw(chat_tool_choice)
    if draw(st.integers(0, 2)) == 0:
        body["response_format"] = draw(response_formats)
    elif draw(st.integers(0, 5)) == 0:
        body["structured_outputs"] = draw(
            mostly(
                st.one_of(
                    st.fixed_dictionaries({"json": top_schemas}),
                    st.fixed_dictionaries({"regex": st.sampled_from(["(", "a+", "[a-z]{2,1}", ""])}),
                    st.fixed_dictionaries({"choice": st.lists(short_text, max_size=3)}),
                    st.fixed_dictionaries({"grammar": short_text}),
                ),
                st.fixed_dictionaries({}, optional={"json": top_schemas, "regex": short_text, "choice": json_values}),
            )
        )
    if draw(st.booleans()):
        body["stream"] = True
        if draw(st.booleans()):
            body["stream_options"] = {"include_usage": True, "continuous_usage_stats": draw(st.booleans())}
    if draw(st.integers(0, 3)) == 0:
        body["n"] = draw(st.integers(1, 3))
    if draw(st.integers(0, 3)) == 0:
        body["parallel_tool_calls"] = draw(mostly(st.booleans(), json_values))
    return body


# -- Responses bodies --------------------------------------------------------------------------------

response_parts = mostly(
    st.fixed_dictionaries({"type": st.just("input_text"), "text": texts})
    | st.fixed_dictionaries({"type": st.just("input_image"), "image_url": image_urls}),
    st.one_of(
        st.fixed_dictionaries({"type": st.just("output_text"), "text": json_values}),
        st.fixed_dictionaries(
            {"type": st.just("input_image")},
            optional={"image_url": json_values, "detail": st.sampled_from(["auto", "low", "x"]), "file_id": short_text},
        ),
        st.fixed_dictionaries(
            {"type": st.just("input_file")},
            optional={"file_data": data_urls(), "file_id": short_text, "filename": short_text},
        ),
        st.fixed_dictionaries({"type": st.just("input_audio")}, optional={"input_audio": json_values}),
        st.fixed_dictionaries({"type": st.just("refusal"), "refusal": texts}),
        json_values,
    ),
    odds=3,
)
call_ids = mostly(st.sampled_from(["call_1", "call_2"]), st.just("") | short_text | json_values)
response_messages = st.fixed_dictionaries(
    {"role": roles, "content": mostly(short_text | st.lists(response_parts, min_size=1, max_size=3), json_values)},
    optional={"type": st.just("message")},
)
response_items = mostly(
    response_messages
    | st.fixed_dictionaries(
        {
            "type": st.just("function_call"),
            "call_id": call_ids,
            "name": tool_names,
            "arguments": mostly(st.just("{}"), texts),
        }
    )
    | st.fixed_dictionaries({"type": st.just("function_call_output"), "call_id": call_ids, "output": texts}),
    st.one_of(
        st.fixed_dictionaries(
            {"type": st.just("function_call"), "call_id": call_ids, "name": tool_names, "arguments": texts},
            optional={"id": short_text, "status": short_text},
        ),
        st.fixed_dictionaries(
            {"type": st.just("reasoning")},
            optional={
                "summary": st.lists(json_values, max_size=2),
                "encrypted_content": short_text,
                "content": json_values,
                "id": short_text,
            },
        ),
        st.fixed_dictionaries({"type": st.just("item_reference"), "id": texts}),
        st.fixed_dictionaries({"type": st.sampled_from(["web_search_call", "computer_call", "mcp_call", "x"])}),
        json_values,
    ),
    odds=3,
)


@st.composite
def responses_tools(draw: st.DrawFn) -> Any:
    tools: list[Any] = []
    for _ in range(draw(st.integers(0, 2))):
        kind = draw(mostly(st.just("function"), st.sampled_from(["web_search", "file_search", "mcp", "x"])))
        tool: dict[str, Any] = {"type": kind}
        if kind == "function":
            tool["name"] = draw(tool_names)
            if draw(st.booleans()):
                tool["parameters"] = draw(top_schemas)
            if draw(st.booleans()):
                tool["strict"] = draw(st.booleans())
        tools.append(tool)
    return tools if draw(st.integers(0, 7)) else draw(json_values)


@st.composite
def responses_bodies(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": MODEL,
        "input": draw(mostly(short_text | st.lists(response_items, min_size=1, max_size=4), st.just([]) | json_values)),
        "max_output_tokens": draw(st.integers(1, 4)),
    }
    if draw(st.booleans()):
        body["tools"] = draw(responses_tools())
        if draw(st.booleans()):
            body["tool_choice"] = draw(
                mostly(
                    st.sampled_from(["auto", "none", "required", {"type": "function", "name": "get_weather"}]),
                    chat_tool_choice | st.fixed_dictionaries({"type": st.just("function"), "name": tool_names}),
                )
            )
    if draw(st.integers(0, 2)) == 0:
        fmt = draw(
            st.fixed_dictionaries(
                {"type": st.just("json_schema"), "name": tool_names, "schema": top_schemas},
                optional={"strict": st.booleans()},
            )
            | st.fixed_dictionaries({"type": st.sampled_from(["text", "json_object", "x"])})
            | json_values
        )
        body["text"] = {"format": fmt}
    if draw(st.integers(0, 3)) == 0:
        body["instructions"] = draw(texts)
    if draw(st.integers(0, 5)) == 0:
        body["previous_response_id"] = draw(st.sampled_from(["resp_missing", ""]) | short_text)
    if draw(st.integers(0, 3)) == 0:
        body["reasoning"] = draw(
            st.fixed_dictionaries(
                {},
                optional={"effort": st.sampled_from(["low", "high", "x"]), "summary": st.sampled_from(["auto", "x"])},
            )
            | json_values
        )
    body["stream"] = draw(st.booleans())
    body["store"] = draw(st.booleans())
    return body


# -- Anthropic Messages bodies ------------------------------------------------------------------------

anthropic_image_source = mostly(
    st.sampled_from(VALID_IMAGES).map(
        lambda image: {"type": "base64", "media_type": "image/png", "data": base64.b64encode(image).decode()}
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("base64"),
            "media_type": MIME,
            "data": image_bytes.map(lambda b: base64.b64encode(b).decode()) | short_text,
        }
    )
    | st.fixed_dictionaries({"type": st.just("url"), "url": bad_image_urls})
    | st.fixed_dictionaries({"type": st.sampled_from(["file", "x"])}, optional={"file_id": short_text})
    | json_values,
    odds=2,
)
tool_use_ids = mostly(st.sampled_from(["toolu_1", "toolu_2"]), st.just("") | short_text)
leaf_blocks = mostly(
    st.fixed_dictionaries({"type": st.just("text"), "text": texts})
    | st.fixed_dictionaries({"type": st.just("image"), "source": anthropic_image_source})
    | st.fixed_dictionaries(
        {
            "type": st.just("tool_use"),
            "id": tool_use_ids,
            "name": tool_names,
            "input": mostly(st.just({"city": "Paris"}), json_values),
        }
    )
    | st.fixed_dictionaries({"type": st.just("thinking"), "thinking": texts, "signature": short_text}),
    st.one_of(
        st.fixed_dictionaries(
            {"type": st.just("text"), "text": short_text | json_values}, optional={"cache_control": json_values}
        ),
        st.fixed_dictionaries(
            {"type": st.just("tool_use"), "id": tool_use_ids, "name": tool_names, "input": json_values}
        ),
        st.fixed_dictionaries(
            {"type": st.just("thinking"), "thinking": short_text | json_values}, optional={"signature": short_text}
        ),
        st.fixed_dictionaries({"type": st.just("redacted_thinking"), "data": short_text}),
        st.fixed_dictionaries({"type": st.just("document"), "source": json_values}),
        st.fixed_dictionaries(
            {"type": st.sampled_from(["server_tool_use", "web_search_tool_result", "search_result", "x"])}
        ),
        json_values,
    ),
    odds=3,
)
anthropic_blocks = st.one_of(
    leaf_blocks,
    st.fixed_dictionaries(
        {"type": st.just("tool_result"), "tool_use_id": tool_use_ids},
        optional={
            "content": mostly(short_text | st.lists(leaf_blocks, max_size=3), json_values),
            "is_error": mostly(st.booleans(), json_values),
        },
    ),
)


@st.composite
def anthropic_tools(draw: st.DrawFn) -> Any:
    tools: list[Any] = []
    for _ in range(draw(st.integers(0, 2))):
        tool: dict[str, Any] = {"name": draw(tool_names)}
        if draw(st.integers(0, 6)):
            tool["input_schema"] = draw(top_schemas)
        if draw(st.integers(0, 5)) == 0:
            tool["type"] = draw(st.sampled_from(["custom", "web_search_20250305", "bash_20250124", "x"]))
        tools.append(tool)
    return tools if draw(st.integers(0, 7)) else draw(json_values)


@st.composite
def anthropic_bodies(draw: st.DrawFn) -> dict[str, Any]:
    messages = [
        {
            "role": draw(mostly(st.sampled_from(["user", "assistant"]), st.just("system"))),
            "content": draw(
                mostly(short_text | st.lists(anthropic_blocks, min_size=1, max_size=3), json_values | st.just([]))
            ),
        }
        for _ in range(draw(st.integers(1, 3)))
    ]
    body: dict[str, Any] = {"model": MODEL, "messages": messages, "max_tokens": draw(st.integers(1, 4))}
    if draw(st.booleans()):
        body["system"] = draw(mostly(short_text, st.lists(leaf_blocks, max_size=2)))
    if draw(st.booleans()):
        body["tools"] = draw(anthropic_tools())
        if draw(st.booleans()):
            body["tool_choice"] = draw(
                mostly(
                    st.sampled_from(
                        [{"type": "auto"}, {"type": "any"}, {"type": "none"}, {"type": "tool", "name": "get_weather"}]
                    ),
                    st.fixed_dictionaries(
                        {"type": st.sampled_from(["auto", "any", "tool", "none", "x"])},
                        optional={"name": tool_names, "disable_parallel_tool_use": st.booleans()},
                    )
                    | json_values,
                )
            )
    if draw(st.integers(0, 3)) == 0:
        body["thinking"] = draw(
            st.fixed_dictionaries(
                {"type": st.sampled_from(["enabled", "adaptive", "disabled", "x"])},
                optional={"budget_tokens": st.integers(-1, 10**6)},
            )
            | json_values
        )
    if draw(st.integers(0, 3)) == 0:
        count = draw(st.sampled_from([0, 1, 4, 16, 17]))  # Anthropic's most is 16
        body["stop_sequences"] = draw(st.lists(st.text(max_size=6), min_size=count, max_size=count))
    if draw(st.integers(0, 3)) == 0:
        body["output_config"] = draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "format": st.fixed_dictionaries({"type": st.just("json_schema"), "schema": top_schemas})
                    | json_values,
                    "effort": st.sampled_from(["low", "max"]),
                },
            )
        )
    body["stream"] = draw(st.booleans())
    return body


# -- embeddings and token ids ----------------------------------------------------------------------

token_ids = mostly(st.integers(0, 1000), st.sampled_from([-1, 2**31, 2**63 - 1, 2**64]) | st.integers(-(2**70), 2**70))
embedding_inputs = mostly(
    st.text(min_size=1, max_size=30)
    | st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=3)
    | st.lists(token_ids, min_size=1, max_size=6)
    | st.lists(st.lists(token_ids, min_size=1, max_size=4), min_size=1, max_size=3),
    st.one_of(
        st.just(""),
        st.just([]),
        st.lists(short_text, max_size=3),
        st.lists(st.lists(token_ids, max_size=2), max_size=2),
        json_values,
    ),
    odds=4,
)


@st.composite
def embedding_bodies(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {"model": draw(mostly(st.just(EMBED), st.just(MODEL))), "input": draw(embedding_inputs)}
    if draw(st.booleans()):
        body["encoding_format"] = draw(mostly(st.sampled_from(["float", "base64"]), st.just("x")))
    if draw(st.integers(0, 5)) == 0:
        body["dimensions"] = draw(st.integers(-1, 10**6) | json_values)
    if draw(st.integers(0, 3)) == 0:
        body["truncate_prompt_tokens"] = draw(st.integers(-2, 100))
    return body


# -- the tests ------------------------------------------------------------------------------------------


def post(gateways: Gateways, keyed: bool, path: str, body: Any) -> None:
    client = gateways.keyed if keyed else gateways.open
    headers = {"Authorization": "Bearer sk-team"} if keyed else {}
    response = client.post(path, content=json.dumps(body), headers={**headers, "content-type": "application/json"})
    assert_answer(response, path)


@fuzz_settings(400)
@given(body=chat_bodies(), keyed=st.booleans())
def test_chat_bodies_never_5xx(body: dict[str, Any], keyed: bool, gateways: Gateways) -> None:
    post(gateways, keyed, "/v1/chat/completions", body)


@fuzz_settings(80)
@given(body=chat_bodies(), keyed=st.booleans())
def test_tokenized_chats_never_5xx(body: dict[str, Any], keyed: bool, gateways: Gateways) -> None:
    body = {k: v for k, v in body.items() if k in ("model", "messages", "tools", "tool_choice")}
    post(gateways, keyed, "/tokenize", body)


@fuzz_settings(300)
@given(body=responses_bodies(), keyed=st.booleans(), count=st.integers(0, 4))
def test_responses_bodies_never_5xx(body: dict[str, Any], keyed: bool, count: int, gateways: Gateways) -> None:
    if count == 0:
        for field in ("stream", "store", "max_output_tokens"):
            body.pop(field)
        post(gateways, keyed, "/v1/responses/input_tokens", body)
    else:
        post(gateways, keyed, "/v1/responses", body)


@fuzz_settings(300)
@given(body=anthropic_bodies(), keyed=st.booleans(), count=st.integers(0, 4))
def test_messages_bodies_never_5xx(body: dict[str, Any], keyed: bool, count: int, gateways: Gateways) -> None:
    if count == 0:
        for field in ("stream", "max_tokens", "stop_sequences"):
            body.pop(field, None)
        post(gateways, keyed, "/v1/messages/count_tokens", body)
    else:
        post(gateways, keyed, "/v1/messages", body)


@fuzz_settings(100)
@given(body=embedding_bodies(), keyed=st.booleans())
def test_embedding_bodies_never_5xx(body: dict[str, Any], keyed: bool, gateways: Gateways) -> None:
    post(gateways, keyed, "/v1/embeddings", body)


@fuzz_settings(60)
@given(tokens=st.lists(token_ids, max_size=6) | json_values, model=st.sampled_from([MODEL, EMBED, None]))
def test_detokenize_bodies_never_5xx(tokens: Any, model: str | None, gateways: Gateways) -> None:
    post(gateways, False, "/detokenize", {"tokens": tokens, **({"model": model} if model else {})})


@pytest.mark.parametrize("image", [declared_png(100_000, 100_000), declared_jpeg(65535, 65535), PNG[:30], b"\x89PNG"])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses", "/v1/messages"])
def test_images_whose_bytes_lie_are_refused_with_a_400(image: bytes, path: str, gateways: Gateways) -> None:
    """The image fuzz's sharpest cases, always run: a header claiming 100000x100000 pixels (a
    decompression bomb's shape), a truncated one, on each API's own image part."""
    url = "data:image/png;base64," + base64.b64encode(image).decode()
    if path == "/v1/chat/completions":
        body: dict[str, Any] = {
            "model": MODEL,
            "max_tokens": 2,
            "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}],
        }
    elif path == "/v1/responses":
        body = {
            "model": MODEL,
            "max_output_tokens": 2,
            "input": [{"role": "user", "content": [{"type": "input_image", "image_url": url}]}],
        }
    else:
        source = {"type": "base64", "media_type": "image/png", "data": url.partition(",")[2]}
        body = {
            "model": MODEL,
            "max_tokens": 2,
            "messages": [{"role": "user", "content": [{"type": "image", "source": source}]}],
        }
    response = gateways.open.post(path, json=body)
    assert response.status_code == 400, response.text
    assert_answer(response, path)


# -- what the fuzzing found, each pinned -------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/responses/input_tokens"])
def test_an_item_reference_with_an_empty_id_is_a_400_naming_it(path: str, gateways: Gateways) -> None:
    """An ``item_reference`` whose ``id`` is ``""`` fell through to the id given to items sent
    without one, which has no prefix for references: a KeyError, a 500."""
    body = {"model": MODEL, "input": [{"type": "item_reference", "id": ""}]}
    response = gateways.open.post(path, json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "input.0.id"


@pytest.mark.parametrize("text", [None, 3, {"a": 1}, ["x"]])
def test_a_text_part_whose_text_is_not_a_string_says_so(text: Any, gateways: Gateways) -> None:
    """It was answered "content parts of type 'text' are not supported by this model", which
    sends a client looking for a model that takes text."""
    body = {
        "model": MODEL,
        "max_tokens": 2,
        "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
    }
    response = gateways.open.post("/v1/chat/completions", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "messages.0.content.0.text", response.text
    assert "'text' string" in response.json()["error"]["message"]


@pytest.mark.parametrize("url", WEIRD_URLS)
def test_every_odd_image_url_is_a_400_naming_the_part(url: str, gateways: Gateways) -> None:
    """URLs an allowed-hosts gateway must parse before refusing: names IDNA cannot encode, ports
    out of range, brackets left open, schemes it does not fetch."""
    part = {"type": "image_url", "image_url": {"url": url}}
    body = {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": [part]}]}
    response = gateways.open.post(  # json.dumps escapes a lone surrogate, as a client's JSON may
        "/v1/chat/completions", content=json.dumps(body), headers={"content-type": "application/json"}
    )
    assert response.status_code == 400, response.text
    assert_answer(response, "/v1/chat/completions")
    assert response.json()["error"]["param"].startswith("messages.0.content.0"), response.text


def test_seventeen_stop_sequences_are_a_400_in_anthropics_shape(gateways: Gateways) -> None:
    """Anthropic takes at most 16 stop sequences (the chat request they become holds as many)."""
    body = {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        response = gateways.open.post(path, json={**body, "stop_sequences": [f"s{i}" for i in range(17)]})
        assert_answer(response, path)


@pytest.mark.parametrize("token", [2**63, 2**64, -(2**64), 2**70])
def test_token_ids_beyond_64_bits_are_a_400(token: int, gateways: Gateways) -> None:
    for path, body in (
        ("/v1/embeddings", {"model": EMBED, "input": [1, token]}),
        ("/v1/embeddings", {"model": EMBED, "input": [[token]]}),
        ("/detokenize", {"model": MODEL, "tokens": [token]}),
    ):
        response = gateways.open.post(path, json=body)
        assert response.status_code == 400, response.text
        assert_answer(response, path)
