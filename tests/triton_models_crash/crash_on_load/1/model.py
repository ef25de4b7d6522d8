"""Crashes the tritonserver that loads it, as Triton 2.51's Python backend now and then does.

The crash Triton's launcher must survive is an abort inside tritonserver while models load (a
``boost::interprocess::lock_exception``). This model sends its tritonserver the same SIGABRT (or
the signal ``CRASH_ON_LOAD_SIGNAL`` names) from ``initialize`` while the count in the file named
by ``CRASH_ON_LOAD_COUNTER`` is below ``CRASH_ON_LOAD_TIMES``, adding one each time; then it loads.
"""

import os
import signal
import time
from pathlib import Path

import numpy as np  # noqa: F401 - the stub needs it for the tensors below
import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found]


def tritonserver_pid() -> int:
    """The nearest ancestor named tritonserver (the stub may run under a shell)."""
    pid = os.getppid()
    while pid > 1:
        if Path(f"/proc/{pid}/comm").read_text().strip() == "tritonserver":
            return pid
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    raise RuntimeError("no tritonserver among this stub's ancestors")


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        counter = Path(os.environ["CRASH_ON_LOAD_COUNTER"])
        crashed = int(counter.read_text()) if counter.exists() else 0
        if crashed < int(os.environ["CRASH_ON_LOAD_TIMES"]):
            counter.write_text(str(crashed + 1))
            os.kill(tritonserver_pid(), signal.Signals[os.environ.get("CRASH_ON_LOAD_SIGNAL", "SIGABRT")])
            time.sleep(30)  # the server is gone; the launcher kills this stub with its group

    def execute(self, requests: list) -> list:  # type: ignore[type-arg]
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT", pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy())]
            )
            for r in requests
        ]
