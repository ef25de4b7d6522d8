"""Each backend contract's per-token cost: a stream's responses, as each layout sends them, read
and assembled in process (``micro`` reports it beside the app's own figure).

The same 64 tokens of prose, one token a response, go through the path a token takes after the
transport: the call's ``StreamReader`` (the contract's reading of a response's outputs) and the
request's ``RequestAssembler`` (the token route's detokenizer included). What differs between
layouts is only that path, so the figures compare contracts; the SSE encoding after it is the
same for all. Best of a few rounds, µs per token.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER = ROOT / "triton_models" / "weights" / "tiny-llm" / "tokenizer.json"
PROSE = "The weather in Paris is mild today, with a light breeze from the west and clouds later on. " * 4


def _bytes_tensor(value: bytes) -> bytes:
    return struct.pack("<I", len(value)) + value


def _message(outputs: list[tuple[str, str, list[int], bytes]], final: bool) -> bytes:
    from tritonclient.grpc import service_pb2

    response = service_pb2.ModelInferResponse(model_name="m", id="r")
    for name, datatype, shape, raw in outputs:
        tensor = response.outputs.add(name=name, datatype=datatype)
        tensor.shape.extend(shape)
        response.raw_output_contents.append(raw)
    response.parameters["triton_final_response"].bool_param = final
    return bytes(service_pb2.ModelStreamInferResponse(infer_response=response).SerializeToString())


def _streams(tokenizer: Any) -> dict[str, tuple[Any, list[bytes], list[int]]]:
    """Per layout: (contract, the stream's messages, the prompt's ids)."""
    from gateway.backend.contracts import build_contract
    from gateway.backend.contracts.vllm import VLLM
    from gateway.backend.types import ModelInterface, TensorSpec

    ids = tokenizer.encode(PROSE, add_special_tokens=False).ids[:64]
    pieces = [tokenizer.decode(ids[: i + 1]).encode() for i in range(len(ids))]
    deltas = [pieces[0]] + [pieces[i][len(pieces[i - 1]) :] for i in range(1, len(pieces))]
    count = struct.pack("<i", 1)
    last = len(ids) - 1

    def spec(name: str, datatype: str, dims: tuple[int, ...] = (1,)) -> TensorSpec:
        return TensorSpec(name, datatype, dims, True)

    text_inputs = {n: spec(n, t) for n, t in (("text_input", "BYTES"), ("max_tokens", "INT32"), ("stream", "BOOL"))} | {
        n: spec(n, "BOOL") for n in ("return_num_input_tokens", "return_num_output_tokens", "exclude_input_in_output")
    }
    ensemble = ModelInterface(text_inputs, {}, True, 8, "ensemble")
    bls_acc = ModelInterface(text_inputs, {}, True, 8, "python", {"accumulate_tokens": "true"})
    tokens_interface = ModelInterface(
        {
            n: spec(n, "INT32", (-1,) if n == "input_ids" else (1,))
            for n in ("input_ids", "input_lengths", "request_output_len", "end_id", "pad_id")
        }
        | {"streaming": spec("streaming", "BOOL")},
        {},
        True,
        8,
        "tensorrtllm",
    )
    llmapi = ModelInterface(
        {n: spec(n, t) for n, t in (("text_input", "BYTES"), ("sampling_param_max_tokens", "INT32"))},
        {},
        True,
        0,
        "python",
    )
    vllm = [
        _message(
            [
                ("text_output", "BYTES", [1], _bytes_tensor(d)),
                ("finish_reason", "BYTES", [1], _bytes_tensor(b"length" if i == last else b"None")),
                ("num_input_tokens", "UINT32", [1], struct.pack("<I", 7)),
                ("num_output_tokens", "UINT32", [1], struct.pack("<I", 1)),
            ],
            i == last,
        )
        for i, d in enumerate(deltas)
    ]

    def text_stream(texts: list[bytes]) -> list[bytes]:
        return [
            _message(
                [
                    ("text_output", "BYTES", [1, 1], _bytes_tensor(t)),
                    ("num_input_tokens", "INT32", [1, 1], struct.pack("<i", 7)),
                    ("num_output_tokens", "INT32", [1, 1], count),
                ],
                i == last,
            )
            for i, t in enumerate(texts)
        ]

    token_stream = [
        _message(
            [
                ("output_ids", "INT32", [1, 1, 1], struct.pack("<i", token)),
                ("sequence_length", "INT32", [1, 1], count),
            ],
            i == last,
        )
        for i, token in enumerate(ids)
    ]
    llmapi_stream = [
        _message(
            [
                ("text_output", "BYTES", [1], _bytes_tensor(p)),
                ("finish_reason", "BYTES", [1], _bytes_tensor(b"length" if i == last else b"None")),
            ],
            i == last,
        )
        for i, p in enumerate(pieces)
    ]
    prompt = tokenizer.encode("Hello there", add_special_tokens=False).ids
    return {
        "vllm": (VLLM, vllm, prompt),
        "ensemble (delta text)": (build_contract("ensemble", ensemble), text_stream(deltas), prompt),
        "bls, accumulate_tokens (cumulative text)": (build_contract("bls", bls_acc), text_stream(pieces), prompt),
        "tensorrt_llm (token ids, detokenized)": (
            build_contract("tensorrt_llm", tokens_interface),
            token_stream,
            prompt,
        ),
        "llmapi (cumulative text, finish reason)": (build_contract("llmapi", llmapi), llmapi_stream, prompt),
    }


def contracts_us_per_token(rounds: int = 5, repeat: int = 20) -> dict[str, float]:
    """µs per token of each layout's read-and-assemble path; empty for a tree without them."""
    try:
        from tokenizers import Tokenizer

        from gateway.backend.error_table import classify_stream_error
        from gateway.backend.stream_messages import StreamReader
        from gateway.backend.types import GenerationRequest, TokenPrompt
        from gateway.core.assemble import RequestAssembler
        from gateway.core.generation_plan import Detokenizing

        streams = _streams(Tokenizer.from_file(str(TOKENIZER)))
    except ImportError:
        return {}
    tokenizer = Tokenizer.from_file(str(TOKENIZER))
    out = {}
    for name, (contract, messages, prompt) in streams.items():
        request = GenerationRequest(
            "r", "m", "Hello there", {"max_tokens": 64}, tokens=TokenPrompt(tuple(prompt), 2, 0), contract=contract
        )
        tokens = name.startswith("tensorrt_llm")
        best = float("inf")
        for _ in range(rounds):
            elapsed = 0
            for _ in range(repeat):
                reader = StreamReader(contract.parser(request), classify_stream_error, contract.plan)
                assembler = RequestAssembler(
                    n=1,
                    chat=True,
                    top_logprobs=None,
                    max_tokens=[64],
                    detokenize=Detokenizing(tokenizer) if tokens else None,
                    prompt_ids=[prompt] if tokens else (),
                )
                feed: Callable[[int, Any], Any] = assembler.feed
                start = time.perf_counter_ns()
                for message in messages:
                    feed(0, reader(message))
                elapsed += time.perf_counter_ns() - start
                if not assembler.done:
                    raise RuntimeError(f"{name}: the stream did not end")
            best = min(best, elapsed / (repeat * len(messages)) / 1000)
        out[name] = best
    return out
