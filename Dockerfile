# tmy in a container (docs/deploy.md).
#
#   docker build -t tmy .
#   docker run -d --name tmy -p 127.0.0.1:8080:8080 -v tmy-data:/app/data tmy
#
# The image is the checkout at /app, installed with `pip install .`: the bot starts
# with the README's own command from the checkout's root, and needs no network at
# run time. Volumes: /app/config (config/tmy.yaml), /app/rules, /app/data (the SQLite
# store data/tmy.db, which the shipped config names as sqlite:///../data/tmy.db).
FROM python:3.11-slim

# TMY_HTTP: listen on every interface of the container (the shipped config says
# 127.0.0.1, which nothing outside the container could reach); the environment beats
# the file, so set TMY_HTTP (not adapters.http.listen) to change the port.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    TMY_HTTP=0.0.0.0:8080

WORKDIR /app

# The dependencies and the package first: editing rules or the config does not reinstall them.
COPY pyproject.toml README.md ./
COPY tmy ./tmy
RUN python3 -m pip install . \
    && rm -rf build tmy.egg-info

COPY run.py ./
COPY config ./config
COPY rules ./rules
COPY plugins ./plugins
COPY examples ./examples

# run.py imports the checkout's tmy/ (not the installed copy), and PYTHONDONTWRITEBYTECODE
# means nothing writes its bytecode at run time: compile it once here, or every `ask`,
# `check`, `reload` … in the container compiles ~200 modules again (~0.2 s of CPU each).
RUN python3 -m compileall -q tmy plugins

# A user of its own, no login, no home beyond the checkout; it owns only data/.
RUN useradd --system --user-group --uid 10001 --home-dir /app --no-create-home \
        --shell /usr/sbin/nologin tmy \
    && mkdir -p /app/data \
    && chown tmy:tmy /app/data

VOLUME ["/app/config", "/app/rules", "/app/data"]
EXPOSE 8080
USER tmy

# /healthz answers 200 while the store answers (503 when it does not, or its last write
# failed); the port follows TMY_HTTP. python, not curl: the slim image has no curl.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python3", "-c", "import os, sys, urllib.request; port = os.environ.get('TMY_HTTP', '0.0.0.0:8080').rsplit(':', 1)[1]; sys.exit(0 if urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=4).status == 200 else 1)"]

# The README's command for running the bot (tests/e2e/test_deploy.py keeps them equal).
# SIGTERM (docker stop) lets runs in flight finish; SIGHUP (docker kill -s HUP) reloads.
CMD ["python3", "run.py"]
