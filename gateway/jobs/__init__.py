"""Work that outlives a request: OpenAI's Batch API (files, batches, their lines) and background
responses.

Job state lives in the gateway's store (``gateway.store``: its connections and its migrations),
so every gateway on one PostgreSQL shares it; the work itself runs through a ``LineRunner`` the
HTTP edge gives (the same route a client's request takes), so a batch line is planned and run as
a request is. This package imports no layer: only the leaves.
"""
