# mcp-resume-proxy as a sidecar. The image serves the bundled demo server by default;
# put your own stdio server in a derived image and pass its command after "--".
#
#   docker build -t mcp-resume-proxy .
#   docker run --rm -p 8808:8808 mcp-resume-proxy
#   docker run --rm -p 8808:8808 -e TOKEN=... mcp-resume-proxy \
#       --upstream https://mcp.example.com/mcp --header 'Authorization: Bearer ${TOKEN}'
#   mcp-resume-proxy example sidecar > sidecar.yaml     # a config to mount, then:
#   docker run --rm -p 8808:8808 -v "$PWD/sidecar.yaml:/etc/mcp-resume-proxy.yaml:ro" \
#       -e MCP_RESUME_PROXY_CONFIG=/etc/mcp-resume-proxy.yaml mcp-resume-proxy
#
# Listens on all interfaces of the container (MCP_RESUME_PROXY_HOST=0.0.0.0 below; it wins
# over listen.host in a config file). The Host check still serves only the names in
# listen.allowed_hosts (default: localhost, 127.0.0.1, ::1, which is what a client of a
# published port sends); clients that reach the container by another name (a service
# name, a domain) get 421 until that name is in listen.allowed_hosts.
#
# /data is the working directory and a VOLUME owned by the image's user (uid 10001): a
# relative store.path lands there, so `store.kind: sqlite` with no path keeps its file at
# /data/mcp-resume-proxy.db. Mount a volume there to keep it across containers.
#
# PID 1 is tini (Debian's): it reaps what is orphaned to it and passes signals on, so
# `docker stop` (SIGTERM) drains the proxy as on any host.
#
# The health check is `mcp-resume-proxy health`: it reads the config as the proxy does
# (MCP_RESUME_PROXY_CONFIG, then MCP_RESUME_PROXY_HOST and _PORT) and asks /healthz on the
# port it sets, so name your config through MCP_RESUME_PROXY_CONFIG, not --config. /healthz
# describes the proxy process: healthy while it serves, even while its upstream fails
# (that shows in the body, upstream.state, and restarting the container would end the
# sessions that still work); unhealthy (503) only once it shuts down.
#
# Servers started with npx (Node) need Node in the image: build with
#   docker build --build-arg WITH_NODE=true -t mcp-resume-proxy .
#
# `hadolint Dockerfile` passes with no warning (tests/test_container.py); that test also
# installs the wheel and runs this image's ENTRYPOINT, CMD and HEALTHCHECK as its user,
# from a fresh data directory, as the container would.
FROM python:3.11-slim

ARG WITH_NODE=false
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
# Debian's own tini, nodejs and npm: their versions move with the base image's security
# updates.
# hadolint ignore=DL3008,SC2086
RUN packages=tini; \
    if [ "$WITH_NODE" = "true" ]; then packages="$packages nodejs npm"; fi; \
    apt-get update \
    && apt-get install -y --no-install-recommends $packages \
    && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml README.md /tmp/mcp-resume-proxy/
COPY proxy /tmp/mcp-resume-proxy/proxy
COPY config /tmp/mcp-resume-proxy/config
RUN pip install /tmp/mcp-resume-proxy \
    && rm -rf /tmp/mcp-resume-proxy \
    && useradd --system --uid 10001 --create-home proxy \
    && install -d -o 10001 -g 10001 -m 0750 /data
WORKDIR /data
VOLUME ["/data"]
USER 10001
ENV MCP_RESUME_PROXY_HOST=0.0.0.0
EXPOSE 8808
HEALTHCHECK --interval=30s --timeout=5s CMD ["mcp-resume-proxy", "health"]
ENTRYPOINT ["/usr/bin/tini", "--", "mcp-resume-proxy", "--log-format", "json"]
CMD ["--", "python", "-m", "proxy.demo"]
