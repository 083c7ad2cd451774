# syntax=docker/dockerfile:1
# vllm-specdec-exporter: the sidecar image. Every RUN command below is run in fresh virtual
# environments by scripts/check_dockerfile.py in CI (no Docker engine there).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN python -m pip wheel --no-cache-dir --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="vllm-specdec-exporter" \
      org.opencontainers.image.description="Prometheus exporter and alerting sidecar for speculative decoding in vLLM" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/vllm-specdec-exporter/vllm-specdec-exporter"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /wheels /wheels
RUN python -m pip install --no-cache-dir --no-index --find-links /wheels vllm-specdec-exporter \
    && rm -rf /wheels
USER 10001:10001
EXPOSE 10088 8080
ENTRYPOINT ["specdec-exporter"]
CMD ["run", "--listen", "0.0.0.0:10088"]
