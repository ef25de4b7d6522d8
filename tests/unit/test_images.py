"""Images: the checks on their bytes, the fetch rules, how a message with images reaches the chat
template, and the ``image`` tensor of the vLLM-backend contract."""

from __future__ import annotations

import asyncio
import base64
import io
import struct
import zlib
from typing import Any

import httpx
import pytest
from PIL import Image
from tritonclient.grpc import service_pb2

from gateway.backend.contracts.tensors import split_bytes
from gateway.backend.contracts.vllm import IMAGE, build_infer_request, infer_request_bytes
from gateway.backend.types import GenerationRequest
from gateway.config import ModelFiles, Settings
from gateway.errors import InvalidRequestError
from gateway.images.check import ImageRules, check_image
from gateway.images.fetch import FetchRules, ImageFetcher, address_allowed, host_allowed
from gateway.models.catalog import ServedModel, _image_parts
from gateway.models.templates import ChatTemplate
from gateway.plan.chat import to_template_messages
from gateway.plan.images import image_parts, load_images
from gateway.plan.requests import ChatCompletionRequest
from gateway.plan.responses import responses_param

RULES = ImageRules(frozenset({"PNG", "JPEG"}), max_bytes=100_000, max_pixels=10_000)


def encoded(width: int, height: int, kind: str = "PNG") -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (10, 20, 30)).save(out, format=kind)
    return out.getvalue()


def declared_png(width: int, height: int) -> bytes:
    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0")) + chunk(b"IEND", b"")


def test_an_allowed_image_passes_with_its_header_facts() -> None:
    checked = check_image(encoded(4, 3), RULES, "p")
    assert (checked.format, checked.width, checked.height) == ("PNG", 4, 3)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (encoded(2, 2, "GIF"), r"not an image in a format this gateway takes \(JPEG, PNG\)"),  # GIF's reader unused
        (encoded(200, 100), "200x100 pixels"),
        (declared_png(1_000_000, 1_000_000), "too many pixels"),  # Pillow's own guard, before ours
        (declared_png(50, 50), "cannot be decoded"),  # a header with no pixels behind it
        (b"\0" * 200_000, "200000 bytes"),
        (b"GIF89a but not really", "not an image"),
    ],
    ids=["format", "pixels", "bomb", "no-pixels", "bytes", "garbage"],
)
def test_refusals_name_the_part(data: bytes, words: str) -> None:
    with pytest.raises(InvalidRequestError, match=words) as caught:
        check_image(data, RULES, "messages.2.content.1")
    assert caught.value.param == "messages.2.content.1"


def test_only_the_allowed_formats_readers_see_the_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    Image.init()
    tried: list[str] = []
    for name, (factory, accept) in list(Image.OPEN.items()):
        if accept is not None:
            monkeypatch.setitem(
                Image.OPEN, name, (factory, lambda prefix, a=accept, n=name: tried.append(n) or a(prefix))
            )
    check_image(encoded(2, 2, "JPEG"), RULES, "p")
    with pytest.raises(InvalidRequestError, match="not an image"):
        check_image(encoded(2, 2, "WEBP"), RULES, "p")
    assert set(tried) <= {"PNG", "JPEG"} and tried


def test_a_format_name_pillow_does_not_know_is_skipped_not_a_crash() -> None:
    rules = ImageRules(frozenset({"NO-SUCH-FORMAT", "PNG"}), max_bytes=100_000, max_pixels=10_000)
    assert check_image(encoded(2, 2), rules, "p").format == "PNG"
    nothing = ImageRules(frozenset({"NO-SUCH-FORMAT"}), max_bytes=100_000, max_pixels=10_000)
    with pytest.raises(InvalidRequestError, match="image_formats"):
        check_image(encoded(2, 2), nothing, "p")


def test_host_allow_list_takes_names_and_subdomain_wildcards() -> None:
    hosts = ("images.example.com", "*.cdn.example.net", "10.0.0.5")
    assert host_allowed("IMAGES.example.com.", hosts)
    assert host_allowed("a.b.cdn.example.net", hosts)
    assert not host_allowed("cdn.example.net", hosts)
    assert not host_allowed("evilcdn.example.net", hosts)
    assert host_allowed("10.0.0.5", hosts)
    assert not host_allowed("example.com", hosts)


@pytest.mark.parametrize(
    ("address", "public", "private"),
    [
        ("93.184.216.34", True, True),
        ("127.0.0.1", False, True),
        ("10.1.2.3", False, True),
        ("169.254.169.254", False, True),  # cloud metadata: link-local
        ("::1", False, True),
        ("::ffff:127.0.0.1", False, True),  # IPv4-mapped loopback
        ("fe80::1%eth0", False, True),
        ("0.0.0.0", False, False),
        ("224.0.0.1", False, False),
        ("2606:4700::1111", True, True),
    ],
)
def test_address_rules(address: str, public: bool, private: bool) -> None:
    assert address_allowed(address, allow_private=False) is public
    assert address_allowed(address, allow_private=True) is private


def test_fetching_off_refuses_before_any_connection() -> None:
    async def go() -> None:
        fetcher = ImageFetcher(FetchRules())
        try:
            with pytest.raises(InvalidRequestError, match="image_fetch_hosts"):
                await fetcher.fetch("http://127.0.0.1:9/x.png", "p")
        finally:
            await fetcher.aclose()

    asyncio.run(go())


@pytest.mark.parametrize("url", ["ftp://example.com/x.png", "file:///etc/passwd", "http:///x.png"])
def test_only_http_urls_with_a_host_are_fetched(url: str) -> None:
    async def go() -> None:
        fetcher = ImageFetcher(FetchRules(hosts=("example.com",)))
        try:
            with pytest.raises(InvalidRequestError, match="http"):
                await fetcher.fetch(url, "p")
        finally:
            await fetcher.aclose()

    asyncio.run(go())


def body(*parts: dict[str, Any]) -> ChatCompletionRequest:
    return ChatCompletionRequest(model="m", messages=[{"role": "user", "content": list(parts)}])


def image(data: bytes) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(data).decode()}}


TEXT = {"type": "text", "text": "what is it?"}


def load(request: ChatCompletionRequest, model: ServedModel, settings: Settings) -> tuple[str, ...]:
    """As planning loads them: the parts stage 3 found and checked, then read."""
    return asyncio.run(load_images(image_parts(request, model, settings), settings, None))


def test_load_images_keeps_the_base64_as_sent_in_order() -> None:
    first, second = encoded(2, 2), encoded(3, 1, "JPEG")
    model = ServedModel(name="m", vision=True)
    loaded = load(body(image(first), TEXT, image(second)), model, Settings())
    assert [base64.b64decode(item) for item in loaded] == [first, second]


def test_image_parts_refuses_a_model_without_vision_and_too_many_images() -> None:
    data = encoded(2, 2)
    with pytest.raises(InvalidRequestError, match="does not take images") as caught:
        image_parts(body(TEXT, image(data)), ServedModel(name="m"), Settings())
    assert caught.value.param == "messages.0.content.1"
    # A TensorRT-LLM model (any layout) has no contract here that carries images, vision or not.
    ensemble = ServedModel(name="m", vision=True, layout="ensemble")
    with pytest.raises(InvalidRequestError, match="does not take images"):
        image_parts(body(image(data)), ensemble, Settings())
    settings = Settings(max_images_per_request=1)
    with pytest.raises(InvalidRequestError, match="at most 1 images") as caught:
        image_parts(body(image(data), image(data)), ServedModel(name="m", vision=True), settings)
    assert caught.value.param == "messages.0.content.1"


def test_no_image_parts_load_nothing() -> None:
    assert load(body(TEXT), ServedModel(name="m"), Settings()) == ()


@pytest.mark.parametrize(
    ("url", "words"),
    [("data:image/png,rawbytes", "base64"), ("https://example.com/a.png", "image_fetch_hosts"), ("", "url")],
)
def test_load_images_refuses_urls_it_cannot_take(url: str, words: str) -> None:
    part = {"type": "image_url", "image_url": {"url": url}}
    with pytest.raises(InvalidRequestError, match=words):
        load(body(part), ServedModel(name="m", vision=True), Settings())


def test_a_text_template_gets_the_placeholder_where_each_image_was() -> None:
    model = ServedModel(name="m", vision=True, image_placeholder="<img>")
    messages = to_template_messages(body(TEXT, image(b""), image(b"")), model)
    assert messages[0]["content"] == "<img>\n<img>\nwhat is it?"  # in front, as vLLM's server
    placed = {"type": "text", "text": "compare <img> with"}
    assert (
        to_template_messages(body(placed, image(b""), image(b"")), model)[0]["content"] == "<img>\ncompare <img> with"
    )
    with pytest.raises(InvalidRequestError, match="more '<img>' placeholders"):
        to_template_messages(body({"type": "text", "text": "<img><img>"}, image(b"")), model)
    silent = ServedModel(name="m", vision=True, image_placeholder="")
    assert to_template_messages(body(TEXT, image(b"")), silent)[0]["content"] == "what is it?"


def test_a_template_that_loops_over_content_gets_image_parts() -> None:
    model = ServedModel(name="m", vision=True, image_parts=True)
    messages = to_template_messages(body(TEXT, image(b"")), model)
    assert messages[0]["content"] == [{"type": "text", "text": "what is it?"}, {"type": "image"}]
    text_only = to_template_messages(body(TEXT), model)
    assert text_only[0]["content"] == "what is it?"  # a message without images stays text


def test_images_without_a_vision_model_are_refused_when_rendering() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        to_template_messages(body(TEXT, image(b"")))
    assert caught.value.param == "messages.0.content.1"


LOOPING = "{% for m in messages %}{% for part in m['content'] %}{{ part['type'] }}{% endfor %}{% endfor %}"
LOOPING_ATTR = "{% for m in messages %}{% for part in m.content | list %}{{ part.type }}{% endfor %}{% endfor %}"
TEXTUAL = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def test_content_format_is_detected_from_the_template_and_settable() -> None:
    assert ChatTemplate(LOOPING).loops_over_content
    assert ChatTemplate(LOOPING_ATTR).loops_over_content
    assert not ChatTemplate(TEXTUAL).loops_over_content
    assert _image_parts(None, ChatTemplate(LOOPING))
    assert not _image_parts(ModelFiles(chat_template_content_format="string"), ChatTemplate(LOOPING))
    assert _image_parts(ModelFiles(chat_template_content_format="openai"), ChatTemplate(TEXTUAL))


def test_the_image_tensor_is_the_backends_base64_strings() -> None:
    request = GenerationRequest("id", "m", "prompt", {"max_tokens": 2}, images=("aGVsbG8=", "d29ybGQ="))
    message = build_infer_request(request)
    names = [tensor.name for tensor in message.inputs]
    position = names.index(IMAGE)
    tensor = message.inputs[position]
    assert (tensor.datatype, list(tensor.shape)) == ("BYTES", [2])
    assert split_bytes(message.raw_input_contents[position]) == (b"aGVsbG8=", b"d29ybGQ=")
    assert infer_request_bytes(request) == message.SerializeToString()
    parsed = service_pb2.ModelInferRequest.FromString(infer_request_bytes(request))
    assert len(parsed.inputs) == len(parsed.raw_input_contents)


def test_a_request_without_images_has_no_image_tensor() -> None:
    message = build_infer_request(GenerationRequest("id", "m", "prompt", {}))
    assert IMAGE not in [tensor.name for tensor in message.inputs]


def test_responses_params_keep_the_items_part() -> None:
    origins = ["instructions", "input.0", "previous_response_id"]
    assert responses_param("messages.1.content.2", origins) == "input.0.content.2"
    assert responses_param("messages.2.content.0", origins) == "previous_response_id"
    assert responses_param("messages.1", origins) == "input.0"


def test_settings_split_comma_lists() -> None:
    settings = Settings(image_formats="png, jpeg", image_fetch_hosts="Images.Example.com,*.cdn.net")
    assert settings.image_formats == ["PNG", "JPEG"]
    assert settings.image_fetch_hosts == ["images.example.com", "*.cdn.net"]


def test_the_connection_goes_to_the_checked_address_under_the_urls_name() -> None:
    async def go() -> tuple[httpx.URL, dict[str, str], dict[str, str]]:
        fetcher = ImageFetcher(FetchRules(hosts=("localhost",), allow_private=True))
        try:
            return await fetcher._pin(httpx.URL("https://localhost:8443/a.png?x=1"), "p")
        finally:
            await fetcher.aclose()

    pinned, headers, extensions = asyncio.run(go())
    assert pinned.host in {"127.0.0.1", "::1"} and pinned.port == 8443 and pinned.raw_path == b"/a.png?x=1"
    assert headers == {"Host": "localhost:8443", "Accept-Encoding": "identity"}
    assert extensions == {"sni_hostname": "localhost"}  # TLS: SNI and the certificate check use the name


def test_a_host_that_never_answers_costs_the_timeout_and_no_more() -> None:
    async def go() -> float:
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(1)  # holds the connection open, answers nothing
            await asyncio.sleep(5)
            writer.close()

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        fetcher = ImageFetcher(FetchRules(hosts=("127.0.0.1",), allow_private=True, timeout=0.3, concurrency=1))
        started = asyncio.get_running_loop().time()
        try:
            results = await asyncio.gather(
                *(fetcher.fetch(f"http://127.0.0.1:{port}/{i}.png", f"p{i}") for i in range(2)), return_exceptions=True
            )
        finally:
            await fetcher.aclose()
            server.close()
        for index, result in enumerate(results):  # the second waited for the only slot, within its timeout
            assert isinstance(result, InvalidRequestError) and "longer than 0.3 s" in result.message
            assert result.param == f"p{index}"
        return asyncio.get_running_loop().time() - started

    assert asyncio.run(go()) < 2.0


def test_the_first_refused_image_cancels_the_other_loads() -> None:
    """A fetch refused (HTTP 404) while another still waits on a silent host ends that one: its
    task is done and its connection closed when ``load_images`` raises, not when it would time out.
    The 404 is sent only once the silent host has its connection, so the order is fixed."""

    async def go() -> None:
        connected, closed = asyncio.Event(), asyncio.Event()

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            connected.set()
            while await reader.read(65536):  # answers nothing; b"" once the client closes
                pass
            closed.set()
            writer.close()

        async def missing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            await connected.wait()
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            writer.close()

        servers = [await asyncio.start_server(handler, "127.0.0.1", 0) for handler in (silent, missing)]
        slow, gone = (server.sockets[0].getsockname()[1] for server in servers)
        settings = Settings(image_fetch_hosts="127.0.0.1", image_fetch_allow_private=True)
        fetcher = ImageFetcher(FetchRules(hosts=("127.0.0.1",), allow_private=True, timeout=60.0))
        parts = [{"type": "image_url", "image_url": {"url": f"http://127.0.0.1:{port}/a.png"}} for port in (slow, gone)]
        found = image_parts(body(*parts), ServedModel(name="m", vision=True), settings)
        try:
            with pytest.raises(InvalidRequestError, match="HTTP 404") as caught:
                await load_images(found, settings, fetcher)
            assert caught.value.param == "messages.0.content.1"
            left = [t for t in asyncio.all_tasks() if not t.done() and t.get_coro().__qualname__ == "_load"]
            assert left == []
            await closed.wait()  # the silent host's connection was closed by the cancellation
        finally:
            await fetcher.aclose()
            for server in servers:
                server.close()

    asyncio.run(go())
