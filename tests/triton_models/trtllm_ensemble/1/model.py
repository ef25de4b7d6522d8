"""A stand-in for a TensorRT-LLM ensemble (see config.pbtxt): the ensemble's tensor contract with
predictable output. Prompt ``ECHO`` answers one JSON object of every input it received (for
mapping tests); any other prompt streams its own words, cycled, one word per step, until
``max_tokens`` words or a stop word. Cancellation is checked before every step."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def _value(request, name):  # type: ignore[no-untyped-def]
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    array = tensor.as_numpy()
    if name in ("stop_words", "bad_words"):
        return [v.decode() if isinstance(v, bytes) else str(v) for v in array.reshape(-1)]
    value = array.reshape(-1)[0]
    if isinstance(value, bytes):
        return value.decode()
    return value.item()


def _send(sender, text: str, final: bool) -> None:  # type: ignore[no-untyped-def]
    out = pb_utils.Tensor("text_output", np.array([[text.encode()]], dtype=object))
    sender.send(pb_utils.InferenceResponse([out]), flags=FINAL if final else 0)


NAMES = (
    "text_input",
    "max_tokens",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
    "min_length",
    "seed",
    "beam_width",
    "stop_words",
    "bad_words",
    "exclude_input_in_output",
)


class TritonPythonModel:
    def initialize(self, args):  # type: ignore[no-untyped-def]
        pass

    def execute(self, requests):  # type: ignore[no-untyped-def]
        for request in requests:
            threading.Thread(target=self._run, args=(request,), daemon=True).start()
        return None

    def _run(self, request) -> None:  # type: ignore[no-untyped-def]
        sender = request.get_response_sender()
        inputs = {name: _value(request, name) for name in NAMES}
        if inputs["text_input"] == "ECHO":
            _send(sender, json.dumps(inputs), final=True)
            return
        words = (inputs["text_input"] or "x").split() or ["x"]
        stops = inputs["stop_words"] or []
        produced = []
        for step in range(int(inputs["max_tokens"])):
            if sender.is_cancelled():
                sender.send(flags=FINAL)
                return
            word = words[step % len(words)] + " "
            if word.strip() in stops:
                break
            produced.append(word)
            if inputs["stream"]:
                _send(sender, word, final=False)
                time.sleep(0.002)
        if inputs["stream"]:
            sender.send(flags=FINAL)  # the ensemble's end: an empty final response
        else:
            _send(sender, "".join(produced), final=True)
