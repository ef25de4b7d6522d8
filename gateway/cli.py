"""``triton-openai-gateway``: flags mirror the ``Settings`` fields (``--triton-url`` is
``triton_url``, env ``GATEWAY_TRITON_URL``); a flag wins over the environment.

``--embedded`` starts a local tritonserver with the shipped tiny model first, so one command gives
a working stack on a laptop.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from typing import Any, get_args

import uvicorn
from pydantic_settings import NoDecode

from gateway.config import ENV_PREFIX, Settings
from gateway.logs import configure_logging


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _parse_list(value: str) -> list[str]:
    """A JSON list, or comma-separated values."""
    if value.strip().startswith("["):
        parsed = json.loads(value)
        return [str(v) for v in parsed]
    return [v.strip() for v in value.split(",") if v.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="triton-openai-gateway",
        description="OpenAI-compatible HTTP gateway in front of NVIDIA Triton Inference Server. "
        f"Every flag can also be set as an environment variable {ENV_PREFIX}<NAME>.",
    )
    for name, field in Settings.model_fields.items():
        help_text = (field.description or "").strip() or None
        env = f"{ENV_PREFIX}{name.upper()}"
        help_text = f"{help_text + ' ' if help_text else ''}[env {env}; default {field.default!r}]"
        annotation = field.annotation
        if annotation is bool:
            parser.add_argument(_flag(name), action=argparse.BooleanOptionalAction, default=None, help=help_text)
            continue
        if getattr(annotation, "__origin__", None) is dict:
            parser.add_argument(_flag(name), dest=name, default=None, type=json.loads, help=help_text)
            continue
        no_decode = any(isinstance(m, NoDecode) or m is NoDecode for m in field.metadata)
        if getattr(annotation, "__origin__", None) is list and not no_decode:
            parser.add_argument(_flag(name), dest=name, default=None, type=_parse_list, help=help_text)
            continue
        choices = get_args(annotation) if getattr(annotation, "__origin__", None) is not None and str(annotation).startswith("typing.Literal") else None
        parser.add_argument(_flag(name), dest=name, default=None, choices=choices or None, help=help_text)
    return parser


def settings_from_args(argv: Sequence[str] | None = None) -> Settings:
    args = build_parser().parse_args(argv)
    given: dict[str, Any] = {k: v for k, v in vars(args).items() if v is not None}
    return Settings(**given)


def main(argv: Sequence[str] | None = None) -> int:
    settings = settings_from_args(argv)
    configure_logging(settings.log_level)
    from gateway.app import create_app
    from gateway.server import DrainingServer

    triton = None
    if settings.embedded:
        from gateway.triton_launcher import (
            DEFAULT_MODEL_REPOSITORY,
            TritonLaunchError,
            TritonServer,
        )

        repositories = settings.model_repository or [DEFAULT_MODEL_REPOSITORY]
        extra = tuple(f"--model-repository={r}" for r in repositories[1:])
        try:
            triton = TritonServer(repositories[0], log_file=settings.triton_log_file, extra_args=extra).start()
        except TritonLaunchError as exc:
            logging.getLogger("gateway").error("%s", exc)
            return 2
        settings = settings.model_copy(update={"triton_url": triton.grpc_url, "model_repository": repositories})
        logging.getLogger("gateway").info(
            "embedded Triton ready on %s (log: %s)", triton.grpc_url, triton.log_file
        )
    try:
        base = f"http://{settings.host}:{settings.port}"
        logging.getLogger("gateway").info(
            "serving on %s — try: curl -N %s/v1/chat/completions -H 'Content-Type: application/json' "
            "-d '{\"model\": \"tiny-llm\", \"stream\": true, \"max_tokens\": 32, "
            "\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}'",
            base,
            base,
        )
        app = create_app(settings)
        config = uvicorn.Config(
            app,
            host=settings.host,
            port=settings.port,
            log_level=settings.log_level,
            access_log=False,
            log_config=None,
            timeout_graceful_shutdown=5,
        )
        DrainingServer(config, app.state.service, settings.shutdown_grace_period).run()
    finally:
        if triton is not None:
            triton.stop()
    return 0
