"""Images in chat messages and Responses input, through a real Triton: tiny-llm says one line
``[image <w>x<h> <sha256 of the RGB pixels>]`` per image it received, so each test proves which
exact pixels arrived, and in which order. Fetched images come from a real HTTP server on
127.0.0.1, started here; refusals are 400s naming the part."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import random
import struct
import threading
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from PIL import Image

from gateway.triton_launcher import TritonServer
from tests.integration.conftest import GatewayProcess, start_gateway, stop_gateway

MODEL = "tiny-llm"


def png(width: int, height: int, seed: int = 0) -> bytes:
    image = Image.new("RGB", (width, height))
    image.putdata(
        [
            ((x * 37 + seed) % 256, (y * 91 + seed) % 256, (x * y + seed) % 256)
            for y in range(height)
            for x in range(width)
        ]
    )
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def noise_png(width: int, height: int) -> bytes:
    """Pixels that do not compress: the file is about 3 bytes per pixel."""
    out = io.BytesIO()
    Image.frombytes("RGB", (width, height), random.Random(0).randbytes(width * height * 3)).save(out, format="PNG")
    return out.getvalue()


def jpeg(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 90)).save(out, format="JPEG")
    return out.getvalue()


def bomb_png(width: int, height: int) -> bytes:
    """A valid PNG header declaring ``width`` x ``height`` with almost no data: a decompression bomb's shape."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\x00")) + chunk(b"IEND", b"")


def line_of(data: bytes) -> str:
    """What tiny-llm says for an image: decoded as Triton's vLLM backend decodes it."""
    with Image.open(io.BytesIO(data)) as image:
        rgb = image.convert("RGB")
    return f"[image {rgb.width}x{rgb.height} {hashlib.sha256(rgb.tobytes()).hexdigest()[:16]}]"


def data_url(data: bytes, kind: str = "image/png") -> str:
    return f"data:{kind};base64,{base64.b64encode(data).decode()}"


def image_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def chat(url: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        url + "/v1/chat/completions", json={"model": MODEL, "max_tokens": 3, "temperature": 0, **body}, timeout=60
    )


def refusal(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 400, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    return error


# --- data: URLs on the default gateway (no fetching) ---------------------------------------------


def test_data_url_images_reach_the_model_pixel_exact_in_order(client: openai.OpenAI) -> None:
    first, second = png(3, 2, seed=1), jpeg(8, 8)
    answer = client.chat.completions.create(
        model=MODEL,
        max_tokens=3,
        temperature=0,
        messages=[
            {
                "role": "user",
                "content": [
                    image_part(data_url(first)),
                    {"type": "text", "text": "what are these?"},
                    image_part(data_url(second, "image/jpeg")),
                ],
            }
        ],
    )
    text = answer.choices[0].message.content or ""
    assert text.startswith(f"{line_of(first)}\n{line_of(second)}\n")


def test_streamed_answer_starts_with_the_image_lines(client: openai.OpenAI) -> None:
    image = png(5, 4, seed=7)
    stream = client.chat.completions.create(
        model=MODEL,
        max_tokens=3,
        temperature=0,
        stream=True,
        messages=[{"role": "user", "content": [{"type": "text", "text": "look"}, image_part(data_url(image))]}],
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text.startswith(line_of(image) + "\n")


def test_text_only_requests_are_unchanged(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(
        model=MODEL,
        max_tokens=3,
        temperature=0,
        messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    )
    assert not (answer.choices[0].message.content or "").startswith("[image")


def test_responses_input_image_reaches_the_model(client: openai.OpenAI) -> None:
    image = png(4, 4, seed=3)
    response = client.responses.create(
        model=MODEL,
        max_output_tokens=3,
        temperature=0,
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "describe"},
                    {"type": "input_image", "image_url": data_url(image)},
                ],
            }
        ],
    )
    assert response.output_text.startswith(line_of(image) + "\n")


def test_responses_refusal_names_the_items_part(gateway: GatewayProcess) -> None:
    response = httpx.post(
        gateway.url + "/v1/responses",
        json={
            "model": MODEL,
            "input": [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "x"},
                        {"type": "input_image", "image_url": data_url(b"not an image")},
                    ],
                }
            ],
        },
        timeout=60,
    )
    assert refusal(response)["param"] == "input.0.content.1"


@pytest.mark.parametrize(
    ("url", "words"),
    [
        (data_url(b"plain text, not an image"), "not an image"),
        (data_url(bomb_png(100_000, 100_000)), "pixels"),
        (data_url(png(64, 64)[:600]), "cannot be decoded"),
        ("data:image/png;base64,@@@", "base64"),
        ("http://127.0.0.1:9/image.png", "image_fetch_hosts"),
    ],
    ids=["not-an-image", "decompression-bomb", "truncated", "bad-base64", "fetching-off"],
)
def test_refused_images_name_their_part(gateway: GatewayProcess, url: str, words: str) -> None:
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": [{"type": "text", "text": "look"}, image_part(url)]},
    ]
    error = refusal(chat(gateway.url, {"messages": messages}))
    assert error["param"] == "messages.1.content.1"
    assert words in error["message"]


def test_model_without_vision_refuses_images(gateway: GatewayProcess) -> None:
    response = httpx.post(
        gateway.url + "/v1/chat/completions",
        json={
            "model": "scripted",
            "max_tokens": 2,
            "messages": [{"role": "user", "content": [image_part(data_url(png(2, 2)))]}],
        },
        timeout=60,
    )
    error = refusal(response)
    assert error["param"] == "messages.0.content.0"
    assert "does not take images" in error["message"]


# --- http(s) URLs: a real server on 127.0.0.1 ----------------------------------------------------

SERVED = {"/small.png": png(6, 3, seed=5), "/big.png": noise_png(150, 150), "/many-pixels.png": bomb_png(500, 500)}


class _Images(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.startswith("/redirect-to/"):
            self.send_response(302)
            self.send_header("Location", self.path[len("/redirect-to/") :].replace("|", "/"))
            self.end_headers()
            return
        if self.path == "/bad-redirect":  # a port no TCP connection can have
            self.send_response(302)
            self.send_header("Location", "http://127.0.0.1:99999/small.png")
            self.end_headers()
            return
        gzipped = self.path == "/gzipped.png"
        body = gzip.compress(SERVED["/small.png"]) if gzipped else SERVED.get(self.path)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        if gzipped:  # sent although identity was asked for
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass


@pytest.fixture(scope="module")
def image_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Images)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def fetching(triton: TritonServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """Fetching from 127.0.0.1, localhost and its subdomains, private addresses allowed, small caps."""
    log = Path(tmp_path_factory.mktemp("images")) / "gateway.log"
    gateway = start_gateway(
        triton.grpc_url,
        log,
        "--image-fetch-hosts",
        "127.0.0.1,localhost,*.localhost",
        "--image-fetch-allow-private",
        "--image-max-bytes",
        "50000",
        "--image-max-pixels",
        "100000",
        "--image-fetch-max-redirects",
        "2",
    )
    yield gateway
    stop_gateway(gateway)


@pytest.fixture(scope="module")
def public_only(triton: TritonServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """127.0.0.1 allowed by name, but private addresses not."""
    log = Path(tmp_path_factory.mktemp("images-public")) / "gateway.log"
    gateway = start_gateway(triton.grpc_url, log, "--image-fetch-hosts", "127.0.0.1,localhost")
    yield gateway
    stop_gateway(gateway)


def test_fetched_image_reaches_the_model(fetching: GatewayProcess, image_server: str) -> None:
    with openai.OpenAI(base_url=fetching.url + "/v1", api_key="unused", max_retries=0) as sdk:
        answer = sdk.chat.completions.create(
            model=MODEL,
            max_tokens=3,
            temperature=0,
            messages=[{"role": "user", "content": [image_part(f"http://{image_server}/small.png")]}],
        )
    assert (answer.choices[0].message.content or "").startswith(line_of(SERVED["/small.png"]) + "\n")


def test_redirect_within_the_allow_list_is_followed(fetching: GatewayProcess, image_server: str) -> None:
    port = image_server.split(":")[1]
    target = f"http:||localhost:{port}|small.png"
    response = chat(
        fetching.url,
        {"messages": [{"role": "user", "content": [image_part(f"http://{image_server}/redirect-to/{target}")]}]},
    )
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"].startswith(line_of(SERVED["/small.png"]))


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("/big.png", "bytes"),
        ("/many-pixels.png", "pixels"),
        ("/missing.png", "HTTP 404"),
        ("/redirect-to/http:||disallowed.example|x.png", "'disallowed.example'"),
        ("/bad-redirect", "not a TCP port"),
        ("/gzipped.png", "Content-Encoding 'gzip'"),
        (f"/redirect-to/http:||{'a' * 64}.localhost|x.png", "does not resolve"),
    ],
    ids=[
        "too-many-bytes",
        "too-many-pixels",
        "not-200",
        "redirect-to-disallowed-host",
        "redirect-to-a-bad-port",
        "compressed",
        "label-over-63",
    ],
)
def test_refused_fetches_name_their_part(fetching: GatewayProcess, image_server: str, path: str, words: str) -> None:
    response = chat(
        fetching.url,
        {
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "x"}, image_part(f"http://{image_server}{path}")]}
            ]
        },
    )
    error = refusal(response)
    assert error["param"] == "messages.0.content.1"
    assert words in error["message"]


def test_disallowed_host_is_not_fetched(fetching: GatewayProcess) -> None:
    error = refusal(
        chat(fetching.url, {"messages": [{"role": "user", "content": [image_part("http://example.com/a.png")]}]})
    )
    assert "'example.com'" in error["message"]


def test_data_url_over_the_byte_cap_is_refused(fetching: GatewayProcess) -> None:
    error = refusal(
        chat(fetching.url, {"messages": [{"role": "user", "content": [image_part(data_url(SERVED["/big.png"]))]}]})
    )
    assert "bytes" in error["message"]


def test_private_address_is_refused_unless_allowed(public_only: GatewayProcess, image_server: str) -> None:
    error = refusal(
        chat(
            public_only.url,
            {"messages": [{"role": "user", "content": [image_part(f"http://{image_server}/small.png")]}]},
        )
    )
    assert "private" in error["message"]
    assert error["param"] == "messages.0.content.0"
