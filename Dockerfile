# syntax=docker/dockerfile:1
# The gateway image: the wheel and its runtime dependencies only (no torch, no Triton), run as a
# non-root user. Triton runs elsewhere (its own image, or beside this one in the same pod).
#
#   docker build -t triton-openai-gateway .
#   docker run --rm -p 8000:8000 -e GATEWAY_TRITON_URL=triton:8001 triton-openai-gateway
#   docker run --rm triton-openai-gateway --help        # flags = GATEWAY_* variables
#
# The Responses API store is a SQLite file in /var/lib/triton-openai-gateway, a VOLUME: give it
# a named volume (-v gateway-state:/var/lib/triton-openai-gateway) to keep conversations across
# containers, or GATEWAY_RESPONSES_STORE=postgresql://... (the postgres extra is installed) when
# several replicas serve one conversation.
#
# Python 3.11, the version the gateway is type-checked and tested on (it needs 3.11 or newer). Both
# stages use the same base so the virtual environment copied between them stays valid.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# The same script tests/deploy/test_image_install.py runs against a real Triton.
COPY deploy/docker/install-gateway.sh /usr/local/bin/install-gateway
# README.m[d]: copied when present (pyproject names it), no error when absent.
COPY pyproject.toml README.m[d] ./
COPY gateway ./gateway
RUN install-gateway /src /opt/venv /tmp/wheels

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="triton-openai-gateway" \
      org.opencontainers.image.description="OpenAI-compatible HTTP gateway in front of NVIDIA Triton Inference Server" \
      org.opencontainers.image.licenses="Apache-2.0"
# The state directory is the one place the gateway writes: its user owns it (mode 0700: the
# SQLite file holds conversations), and a new volume mounted there starts as a copy of it.
RUN groupadd --system --gid 10001 gateway \
 && useradd --system --uid 10001 --gid gateway --no-create-home --home-dir /nonexistent \
            --shell /usr/sbin/nologin gateway \
 && install -d -o 10001 -g 10001 -m 0700 /var/lib/triton-openai-gateway
COPY --from=build /opt/venv /opt/venv
# Bytecode was compiled at install time; nothing is written at run time outside the state
# volume, so the root filesystem can be mounted read-only (the Helm chart does). The store's
# default would be ~/.local/state/..., and the user has no home: the image points it at the volume.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    GATEWAY_HOST=0.0.0.0 \
    GATEWAY_PORT=8000 \
    GATEWAY_RESPONSES_STORE=sqlite:////var/lib/triton-openai-gateway/responses.db
VOLUME ["/var/lib/triton-openai-gateway"]
USER 10001:10001
EXPOSE 8000
# Liveness of the process, on whatever port GATEWAY_PORT says (no curl in slim images).
HEALTHCHECK --interval=15s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('GATEWAY_PORT', '8000'), timeout=4)"]
# One entrypoint, the CLI: flags and GATEWAY_* variables work as with a local install.
ENTRYPOINT ["triton-openai-gateway"]
CMD []
