"""``triton-openai-gateway``: flags mirror the ``Settings`` fields (``--triton-url`` is
``triton_url``, env ``GATEWAY_TRITON_URL``); a flag wins over the environment.

``--embedded`` starts a local tritonserver with the shipped tiny model first, so one command gives
a working stack on a laptop. Triton goes down with the gateway however it ends: SIGINT or SIGTERM
before the gateway serves stop Triton and exit with 128 + the signal number; once it serves, the
first signal drains (``DrainingServer``), Triton is stopped after it and the exit code is 0; a
second signal while Triton stops kills it at once; a crash stops it in ``finally``; and if the
gateway is killed outright the kernel kills Triton (``triton_launcher``).

``--workers N`` (N > 1) runs N gateway processes on the port under ``gateway.workers``; this
process starts the one embedded Triton before them and stops it after the last has drained.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, get_args

import uvicorn
from pydantic_settings import NoDecode

from gateway.config import ENV_PREFIX, Settings
from gateway.logs import configure_logging

if TYPE_CHECKING:
    from gateway.triton_launcher import TritonServer

logger = logging.getLogger("gateway")

TRITON_STOP_GRACE = 10.0
"""Seconds Triton gets to exit after SIGTERM before SIGKILL. The gateway has drained by then, so
nothing is in flight; a ready Triton exits in about 3 s, one still loading in under 1 s."""


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
        choices = (
            get_args(annotation)
            if getattr(annotation, "__origin__", None) is not None and str(annotation).startswith("typing.Literal")
            else None
        )
        parser.add_argument(_flag(name), dest=name, default=None, choices=choices or None, help=help_text)
    return parser


def settings_from_args(argv: Sequence[str] | None = None) -> Settings:
    args = build_parser().parse_args(argv)
    given: dict[str, Any] = {k: v for k, v in vars(args).items() if v is not None}
    return Settings(**given)


class StopRequestedError(BaseException):
    """SIGINT or SIGTERM arrived outside uvicorn's own handlers (while Triton starts or stops).

    A ``BaseException``, like ``KeyboardInterrupt``, so no ``except Exception`` on the way swallows it.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise StopRequestedError(signum)


def install_stop_handlers() -> None:
    """SIGINT and SIGTERM raise ``StopRequestedError`` in the main thread until uvicorn takes over
    (and again after it hands back), so Triton is stopped in order however early the signal comes.

    Installed even where the shell started us with SIGINT ignored (``cmd &`` in a script): uvicorn
    listens to SIGINT regardless once it serves, and a Ctrl-C that works only after startup looks
    like a hang.
    """
    if threading.current_thread() is not threading.main_thread():
        return  # signals reach the main thread only; whoever runs us there owns them
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _raise_stop)


def main(argv: Sequence[str] | None = None) -> int:
    settings = settings_from_args(argv)
    configure_logging(settings.log_level)
    install_stop_handlers()
    try:
        return _run(settings)
    except StopRequestedError as stop:
        name = signal.Signals(stop.signum).name
        logger.error("interrupted by %s; exiting with code %d", name, 128 + stop.signum)
        return 128 + stop.signum


def _run(settings: Settings) -> int:
    triton = None
    if settings.embedded:
        started = _start_triton(settings)
        if started is None:
            return 2
        triton, settings = started
    try:
        return _serve(settings)
    finally:
        if triton is not None:
            try:
                triton.stop(grace=TRITON_STOP_GRACE)
            except StopRequestedError:
                logger.warning("signal while Triton was stopping: killed it")
                raise


def _start_triton(settings: Settings) -> tuple[TritonServer, Settings] | None:
    """The embedded tritonserver, started and ready, and the settings that point at it; None
    (logged) when it could not start."""
    from gateway.tracing import traces_endpoint
    from gateway.triton_launcher import (
        DEFAULT_MODEL_REPOSITORY,
        TritonLaunchError,
        TritonServer,
        opentelemetry_trace_args,
    )

    repositories = [r.resolve() for r in settings.model_repository or [DEFAULT_MODEL_REPOSITORY]]
    working_dir = (settings.triton_working_dir or Path.cwd()).resolve()
    extra = tuple(f"--model-repository={r}" for r in repositories[1:])
    if settings.otlp_traces_endpoint:  # Triton's spans in the gateway's traces, at the same collector
        extra += opentelemetry_trace_args(traces_endpoint(settings.otlp_traces_endpoint))
    triton = TritonServer(
        repositories[0],
        log_file=settings.triton_log_file,
        extra_args=extra,
        auto_complete_config=settings.triton_auto_complete_config,
        working_dir=working_dir,
        ready_timeout=settings.triton_start_timeout,
    )
    try:
        triton.start()
    except TritonLaunchError as exc:
        logger.error("%s", exc)
        return None
    except StopRequestedError:
        logger.warning("Triton was still starting; stopped it")
        raise
    settings = settings.model_copy(
        update={
            "triton_url": triton.grpc_url,
            "triton_metrics": str(triton.metrics_port),
            "model_repository": repositories,
            "triton_working_dir": working_dir,
        }
    )
    logger.info("embedded Triton ready on %s (log: %s)", triton.grpc_url, triton.log_file)
    return triton, settings


def _serve(settings: Settings) -> int:
    """Serve until stopped: ``settings.workers`` processes, or this one under a draining uvicorn."""
    if settings.workers > 1:
        from gateway.workers import run_workers

        return run_workers(settings)
    from gateway.app import create_app
    from gateway.server import DrainingServer

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
    DrainingServer(config, app.state.components, settings.shutdown_grace_period).run()
    return 0
