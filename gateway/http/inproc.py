"""Batch lines answered in process, by the very handlers that answer a client's request.

A batch line is a request without a connection. ``InProcessLines.run`` gives it what the edge
gives a request (its key and owner, a request id, the ``jobs_priority`` band), then takes the
path ``http.direct`` takes: the body parsed and validated by the endpoint's model, the route's
handler with the app's ``Components``, and any error answered by the handler ``http.errors``
installs for it. So a line is planned, admitted, run and refused exactly as the same request
would be, in the same words and with the same status, and its answer is the bytes a client would
have received.

Two answers are not a line's: the scheduler shedding it (no idle slot of its model) and its key's
own limits refusing it (rpm, tpm, concurrency) mean "not now", and come back as
``LineAnswer.retry_after`` for the runner to wait and try again.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.requests import Request
from starlette.types import Message

from gateway.errors import AuthenticationError, QueueRefusedError
from gateway.http.deps import PRIORITY_HEADER, Components
from gateway.http.direct import DIRECT_ROUTES, parse_body
from gateway.http.errors import error_handler_for
from gateway.http.security import OWNER
from gateway.jobs.runner import LineAnswer, LineCall
from gateway.keys.context import RequestKey, current_key, keys_required
from gateway.keys.limits import LimitStore, LimitUnavailable, retry_after
from gateway.keys.policy import KeyRing

_JSON = b"application/json"


class InProcessLines:
    """The ``jobs.runner.LineRunner`` of a gateway: its components, its keys and their limits."""

    def __init__(self, components: Components, ring: KeyRing, limits: LimitStore | None) -> None:
        self.components = components
        self.ring = ring
        self.limits = limits

    async def run(self, call: LineCall) -> LineAnswer:
        if self.components.service.draining:  # stopping: the line waits, and the stop gives it back
            return LineAnswer(retry_after=1.0)
        keyed = self.ring.keyed
        policy = self.ring.lookup_owner(call.owner) if call.owner else None
        if keyed and policy is None:
            gone = AuthenticationError("The API key that created this batch is no longer accepted by this gateway.")
            return await self._answer_error(call, gone)
        limits = self.limits if policy is not None and policy.limited else None
        required = keys_required.set(keyed)
        key = current_key.set(RequestKey(policy, limits) if policy is not None else None)
        try:
            if limits is None or policy is None:
                return await self._answer(call)
            try:
                admit = await limits.admit(policy, generating=True)
            except LimitUnavailable:
                return LineAnswer(retry_after=5.0)
            if admit.refused is not None:
                return LineAnswer(retry_after=float(retry_after(admit)))
            try:
                return await self._answer(call)
            finally:
                if admit.lease is not None:
                    await limits.release(policy, admit)
        finally:
            current_key.reset(key)
            keys_required.reset(required)

    async def _answer(self, call: LineCall) -> LineAnswer:
        request = self._request(call)
        route = DIRECT_ROUTES[call.url]
        try:
            body = parse_body(self._body(call.body).encode(), "application/json", route.model)
            response = await route.endpoint(body, request, self.components)
        except QueueRefusedError:  # no idle slot now: the line waits (the runner's backoff), it is not refused
            return LineAnswer(retry_after=0.0)
        except Exception as exc:
            handler = error_handler_for(exc)
            if handler is None:
                raise
            response = await handler(request, exc)
        return await _capture(response, request)

    async def _answer_error(self, call: LineCall, error: Exception) -> LineAnswer:
        request = self._request(call)
        handler = error_handler_for(error)
        assert handler is not None
        return await _capture(await handler(request, error), request)

    def _request(self, call: LineCall) -> Request:
        band = str(self.components.settings.jobs_priority).encode()
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": call.url,
            "raw_path": call.url.encode(),
            "root_path": "",
            "query_string": b"",
            "headers": [(b"content-type", _JSON), (PRIORITY_HEADER.encode(), band)],
            "client": None,
            "server": None,
            "state": {"request_id": call.request_id, OWNER: call.owner},
        }
        return Request(scope, _never_disconnects)

    def _body(self, body: str) -> str:
        """The line's body, its ``priority`` (if it names one) no more urgent than
        ``jobs_priority``: a batch line runs in idle capacity whatever it asks."""
        if '"priority"' not in body:
            return body
        floor = self.components.settings.jobs_priority
        data = json.loads(body)
        asked = data.get("priority")
        if isinstance(asked, int) and not isinstance(asked, bool) and asked < floor:
            data["priority"] = floor
            return json.dumps(data)
        return body


async def _never_disconnects() -> Message:
    """A line has no client to leave; its task is cancelled when it must stop."""
    await asyncio.get_running_loop().create_future()
    raise AssertionError("unreachable")


async def _capture(response: Any, request: Request) -> LineAnswer:
    status = 0
    chunks: list[bytes] = []

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await response(request.scope, request.receive, send)
    body = b"".join(chunks)
    return LineAnswer(status, body if body else b"{}")
