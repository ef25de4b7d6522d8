"""HTTP routes: one module per endpoint group, each handler a few lines.

The POSTs ``http.direct`` calls (chat, completions, responses, messages, embeddings) are declared
in these modules for FastAPI too, which builds the OpenAPI document from them and answers their
other methods; ``http.direct`` calls the same handler functions for the requests themselves."""

from __future__ import annotations

import logging

from pydantic import BaseModel

logger = logging.getLogger(__name__)


def log_unknown_fields(body: BaseModel) -> None:
    """Fields OpenAI (or a newer client) sends that the gateway ignores: visible at debug level."""
    if body.model_extra and logger.isEnabledFor(logging.DEBUG):
        logger.debug("ignoring unknown fields: %s", sorted(body.model_extra))
