"""Answers every request with the stub's view of text encodings, as JSON.

What a user's model meets when it opens a file without ``encoding=`` (torch's inductor does, and
dies under ASCII): ``locale.getpreferredencoding(False)`` is what ``open`` uses. ``utf8_text`` is
such a read of a UTF-8 file beside this one, or the error it raised.
"""

import json
import locale
import sys
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found]


def read_utf8_text() -> str:
    try:
        with open(Path(__file__).with_name("utf8.txt")) as handle:  # no encoding=, on purpose
            return handle.read().strip()
    except UnicodeDecodeError as exc:
        return f"UnicodeDecodeError: {exc}"


def report() -> str:
    return json.dumps(
        {
            "preferred_encoding": locale.getpreferredencoding(False),
            "lc_ctype": locale.setlocale(locale.LC_CTYPE),
            "filesystem_encoding": sys.getfilesystemencoding(),
            "stdout_encoding": getattr(sys.stdout, "encoding", None),
            "isolated": sys.flags.isolated,
            "utf8_text": read_utf8_text(),
        }
    )


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        self._report = report()  # as the model saw it while loading, where imports happen
        print("locale_probe: ✓", flush=True)  # a non-ASCII print must not kill the stub either

    def execute(self, requests: list) -> list:  # type: ignore[type-arg]
        out = np.array([self._report.encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("REPORT", out)]) for _ in requests]
