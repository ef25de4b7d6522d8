"""instructor (``instructor.from_openai`` over the official ``OpenAI`` client): a pydantic model
created in each of its OpenAI modes, tools, JSON schema and Responses tools, with no retry, so a
failed validation shows instead of being asked again."""

from __future__ import annotations

import instructor
import pytest
from openai import OpenAI

from tests.client_lane.common import MODEL, SEED, Forecast, Recorder

# Each mode's endpoint and the request field that carries the model's schema.
MODES = {
    instructor.Mode.TOOLS: ("/v1/chat/completions", "tools"),
    instructor.Mode.JSON_SCHEMA: ("/v1/chat/completions", "response_format"),
    instructor.Mode.RESPONSES_TOOLS: ("/v1/responses", "tools"),
}


# TOOLS names the model's tool with pydantic's schema, which leaves the object open: the gateway
# closes it for the forced call (else tiny-llm adds properties of its own, one holding a number
# beyond a float's range).
@pytest.mark.parametrize("mode", list(MODES), ids=[mode.name for mode in MODES])
def test_create_a_model(base_url: str, mode: instructor.Mode) -> None:
    recorder = Recorder()
    with recorder.sync() as http, OpenAI(base_url=base_url, api_key="unused", max_retries=0, http_client=http) as sdk:
        client = instructor.from_openai(sdk, mode=mode)
        forecast = client.create(
            model=MODEL,
            response_model=Forecast,
            messages=[{"role": "user", "content": "A forecast for Paris."}],
            max_retries=0,
            # The Responses API has no seed parameter: it goes in the body as an extra.
            extra_body={"seed": SEED},
        )
    assert isinstance(forecast, Forecast)
    path, field = MODES[mode]
    (body,) = recorder.bodies()
    assert recorder.requests[0]["path"] == path and field in body
