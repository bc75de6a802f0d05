# panewarden service image: the supervisor, its pane workers and the built-in demo agent.
#
#   docker build -t panewarden .
#   docker run --rm --network host \
#     -v "$HOME/.config/panewarden:/config:ro" \
#     -e PANEWARDEN_TOKEN_FILE=/config/token \
#     panewarden
#
# The image holds no token, no clients file and no profiles: mount them and name them with
# the PANEWARDEN_* variables at run time (docs/operations.md, "Running panewarden as a
# service"). It exposes no port: the service listens on loopback only, so use
# `--network host` (the host's loopback) or `docker exec -i CONTAINER panewarden stdio-proxy`.
# Coding-agent CLIs are not included; build FROM this image to add the ones you need.

FROM python:3.11-slim

# tini as PID 1: forwards SIGTERM/SIGHUP to the supervisor and reaps any zombie that ends
# up with PID 1 (the supervisor is a subreaper for its own panes, tini covers the rest).
# git for writer lanes; bubblewrap for verify (it needs user namespaces, which a container
# often lacks: `panewarden doctor` says whether the sandbox works there).
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini git bubblewrap \
    && rm -rf /var/lib/apt/lists/*

# A fixed non-root uid so mounted token/profiles files (mode 0600) can be owned by it.
RUN useradd --create-home --uid 1000 --user-group --shell /bin/bash panewarden

WORKDIR /opt/panewarden
COPY pyproject.toml README.md ./
COPY protocol ./protocol
COPY paneworker ./paneworker
COPY supervisor ./supervisor
RUN pip install --no-cache-dir . \
    && rm -rf /opt/panewarden/build

USER panewarden
WORKDIR /home/panewarden
ENV PANEWARDEN_STATE_DIR=/home/panewarden/.local/state/panewarden \
    PYTHONUNBUFFERED=1

ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["panewarden", "serve", "--http", "--host", "127.0.0.1"]
