# mcp-resume-proxy as a sidecar. The image serves the bundled demo server by default;
# put your own stdio server in a derived image and pass its command after "--".
#
#   docker build -t mcp-resume-proxy .
#   docker run --rm -p 8808:8808 -e MCP_RESUME_PROXY_HOST=0.0.0.0 mcp-resume-proxy
#   docker run --rm -p 8808:8808 -e MCP_RESUME_PROXY_HOST=0.0.0.0 -e TOKEN=... \
#       mcp-resume-proxy --upstream https://mcp.example.com/mcp --header 'Authorization: Bearer ${TOKEN}'
#
# The health check follows /healthz, which describes the proxy process: healthy while it
# serves, even while its upstream fails (that shows in the body, upstream.state, and
# restarting the container would end the sessions that still work); unhealthy (503) only
# once it shuts down. It asks 127.0.0.1: keep that in listen.allowed_hosts (the default
# and config/sidecar.yaml do), or /healthz answers 421.
#
# Inside the container the proxy still binds 127.0.0.1 unless told otherwise
# (MCP_RESUME_PROXY_HOST=0.0.0.0, or listen.host in a config file such as
# config/sidecar.yaml, mounted and named by MCP_RESUME_PROXY_CONFIG).
#
# Servers started with npx (Node) need Node in the image: build with
#   docker build --build-arg WITH_NODE=true -t mcp-resume-proxy .
#
# `hadolint Dockerfile` passes with no warning (tests/test_container.py); the test suite
# also builds the wheel, installs it in a fresh virtualenv and runs this image's entry
# command with config/sidecar.yaml, as the container would.
FROM python:3.11-slim

ARG WITH_NODE=false
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
# Debian's own nodejs and npm: their versions move with the base image's security updates.
# hadolint ignore=DL3008
RUN if [ "$WITH_NODE" = "true" ]; then \
        apt-get update \
        && apt-get install -y --no-install-recommends nodejs npm \
        && rm -rf /var/lib/apt/lists/*; \
    fi
WORKDIR /opt/mcp-resume-proxy
COPY pyproject.toml README.md ./
COPY proxy ./proxy
COPY config ./config
RUN pip install . && useradd --system --uid 10001 --create-home proxy
USER 10001
EXPOSE 8808
HEALTHCHECK --interval=30s --timeout=3s CMD ["python", "-c", "import urllib.request, os; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('MCP_RESUME_PROXY_PORT', '8808') + '/healthz', timeout=2)"]
ENTRYPOINT ["mcp-resume-proxy", "--log-format", "json"]
CMD ["--", "python", "-m", "proxy.demo"]
