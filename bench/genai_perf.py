"""Run NVIDIA genai-perf against the gateway's chat endpoint (starts Triton + gateway, then stops them).

genai-perf drives ``perf_analyzer``, a C++ binary that PyPI's ``perf_analyzer`` package does not
contain (it is a placeholder); the binary ships inside the ``tritonclient==2.51.0`` manylinux wheel
and needs ``libb64.so.0d`` and ``libcudart.so.12``, which ``nvidia-pytriton`` carries under hashed
names. One-time setup (a separate venv: genai-perf pins its own numpy/transformers):

    python3 -m venv /tmp/genai-venv && /tmp/genai-venv/bin/pip install genai-perf==0.0.16
    /tmp/genai-venv/bin/pip download tritonclient==2.51.0 --no-deps -d /tmp/tc251
    python3 -c "import zipfile; zipfile.ZipFile(next(__import__('pathlib').Path('/tmp/tc251').glob('*.whl'))).extract('tritonclient-2.51.0.data/data/bin/perf_analyzer', '/tmp/pa')"
    chmod +x /tmp/pa/tritonclient-2.51.0.data/data/bin/perf_analyzer
    ln -sf /tmp/pa/tritonclient-2.51.0.data/data/bin/perf_analyzer /tmp/genai-venv/bin/perf_analyzer
    mkdir -p /tmp/pa/lib; L=.venv/lib/python3.11/site-packages/nvidia_pytriton.libs
    ln -sf $PWD/$L/libb64-*.so.0d /tmp/pa/lib/libb64.so.0d; ln -sf $PWD/$L/libcudart-*.so.12* /tmp/pa/lib/libcudart.so.12

Then:  .venv/bin/python bench/genai_perf.py --concurrency 4
"""  # noqa: E501 - shell recipe lines

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, exit_on_sigterm, log, start_gateway, start_triton  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="genai-perf against the gateway's /v1/chat/completions",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--genai-perf", default="/tmp/genai-venv/bin/genai-perf")
    parser.add_argument("--lib-dir", default="/tmp/pa/lib", help="holds libb64.so.0d and libcudart.so.12")
    parser.add_argument("--model", default="tiny-llm")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--input-tokens", type=int, default=32)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--artifact-dir", type=Path, default=Path(tempfile.gettempdir()) / "genai-perf-artifacts")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    work = Path(tempfile.mkdtemp(prefix="gw-genai-"))
    triton = start_triton(work / "tritonserver.log")
    gateway = None
    try:
        gateway = start_gateway(triton.grpc_url, work / "gateway.log", [])
        command = [
            args.genai_perf,
            "profile",
            "-m",
            args.model,
            "--endpoint-type",
            "chat",
            "--streaming",
            "-u",
            f"127.0.0.1:{gateway.port}",
            "--concurrency",
            str(args.concurrency),
            "--synthetic-input-tokens-mean",
            str(args.input_tokens),
            "--output-tokens-mean",
            str(args.output_tokens),
            "--extra-inputs",
            f"max_tokens:{args.output_tokens}",
            "--extra-inputs",
            "ignore_eos:true",
            # a local tokenizer: nothing may be fetched from a model hub here
            "--tokenizer",
            str(ROOT / "triton_models" / "weights" / "tiny-llm"),
            "--request-count",
            str(args.requests),
            "--warmup-request-count",
            "4",
            "--artifact-dir",
            str(args.artifact_dir),
        ]
        log("$ " + " ".join(command))
        env = {
            **os.environ,
            "LD_LIBRARY_PATH": args.lib_dir,
            "HF_HUB_OFFLINE": "1",
            "PATH": f"{Path(args.genai_perf).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        return subprocess.run(command, env=env, check=False).returncode  # noqa: S603
    finally:
        if gateway is not None:
            gateway.stop()
        triton.stop()


if __name__ == "__main__":
    raise SystemExit(main())
