# syntax=docker/dockerfile:1
# vllm-specdec-exporter: the sidecar image. Every RUN command below is run in fresh virtual
# environments by scripts/check_dockerfile.py in CI (no Docker engine there); for the apt-get
# one it checks that the packages it names are installed there.
# Reproducible: every dependency is pinned with its hashes in requirements.lock (build stage:
# requirements-build.lock), both written by `python scripts/lock.py`; the project itself is
# installed --no-deps. A release also pins the base image by digest, see docs/deploy.md.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# The tap is compiled to C extensions by mypyc (setup.py): a C compiler and libc's headers here;
# the base image has Python's. The final stage gets only the built wheel.
RUN apt-get update \
    && apt-get install --yes --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# The runtime lock's pins plus setuptools, wheel and mypy: mypyc checks the tap against the
# packages it runs with.
COPY requirements-build.lock ./
RUN python -m pip install --no-cache-dir --require-hashes -r requirements-build.lock
COPY pyproject.toml setup.py README.md ./
COPY src ./src
# The image leaves out the dev tools the sidecar never runs: the vLLM simulator and the sweep
# (`simulate`, `sweep` and the simulated `demo` say so in one line). The load generator stays:
# `calibrate` drives it.
RUN rm -r src/specdec_exporter/devtools/sim src/specdec_exporter/devtools/sweep \
    && SPECDEC_COMPILE=1 python -m pip wheel --no-cache-dir --no-deps --no-build-isolation \
       --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="vllm-specdec-exporter" \
      org.opencontainers.image.description="Prometheus exporter and alerting sidecar for speculative decoding in vLLM" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/vllm-specdec-exporter/vllm-specdec-exporter"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Dependencies first, from the lock alone, so that a code change does not rebuild this layer.
COPY requirements.lock /deps/
RUN python -m pip install --no-cache-dir --require-hashes -r /deps/requirements.lock \
    && rm -rf /deps
COPY --from=build /wheels /wheels
# pip check: the locked versions satisfy the project's requirements. Then pip, setuptools and
# wheel go: nothing at run time needs them.
RUN python -m pip install --no-cache-dir --no-deps --no-index /wheels/*.whl \
    && python -m pip check \
    && rm -rf /wheels \
    && python -m pip uninstall --yes --quiet setuptools wheel pip
# The engine probe, for vLLM's PYTHONPATH: pure-Python sources (never the compiled tap) and a
# minimal dist-info with the vllm.stat_logger_plugins entry point. The probe component's init
# container copies this directory into the vLLM pod (deploy/components/probe, docs/deploy.md).
RUN specdec-exporter install-probe --quiet /opt/specdec-probe
USER 10001:10001
EXPOSE 10088 10089
ENTRYPOINT ["specdec-exporter"]
# No option here: a flag wins over its SPECDEC_* variable, so an option in CMD would silently
# override `docker run -e SPECDEC_LISTEN=...`. `run` listens on 0.0.0.0:10088 by default.
CMD ["run"]
