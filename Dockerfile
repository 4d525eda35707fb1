# splitdns: two images from one file (README.md, "The images": what each holds, how to build them).
#
#   docker build --target resolver -t REGISTRY/splitdns:VERSION .        # what the pod runs
#   docker build --target tools -t REGISTRY/splitdns-tools:VERSION .     # webhook, check, render, ...
#   podman build --build-arg BASE_IMAGE=registry.example.com/mirror/debian:bookworm-slim ...
#
# The resolver image holds Debian bookworm's python3.11 with a pruned standard library,
# dnspython, prometheus_client and splitdns, and nothing else but sh and a few coreutils: its
# entrypoint is `splitdns serve`, so a pod spec written for CoreDNS (args: ["-conf", FILE]) works
# unchanged; `splitdns verify`, `openvpn-hook` and `wireguard-shim` (which writes the resolvconf a
# WireGuard sidecar puts on wg-quick's PATH) run from it too. The tools image holds everything the
# other commands need (the admission webhook's aiohttp, render and check's validators and schemas).
# Both run as a fixed uid and write nothing: fine with readOnlyRootFilesystem. Binding port 53 as
# non-root needs the pod sysctl net.ipv4.ip_unprivileged_port_start=53 (what `splitdns render`
# emits). `make test` builds both with podman and runs them as the rendered pods run them
# (tests/test_image.py).

# Any Debian bookworm image: its python3 (installed here unless it is there) is the resolver's.
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS build
RUN command -v python3 >/dev/null && python3 -c "import venv, ensurepip" 2>/dev/null \
 || { apt-get update -qq && apt-get install -y -qq --no-install-recommends python3 python3-venv \
        ca-certificates && rm -rf /var/lib/apt/lists/*; }
WORKDIR /src
COPY pyproject.toml README.md ./
COPY tools/image_requirements.py tools/resolver_rootfs.py ./tools/
COPY src ./src
# Wheels are built and installed with a throw-away pip; neither image gets pip. The resolver's
# packages go to a plain directory (tools/image_requirements.py --resolver: dnspython and
# prometheus_client), the tools' to a virtualenv with every dependency but the developer extras.
RUN python3 -m venv /opt/build \
 && /opt/build/bin/pip wheel --quiet --no-cache-dir --no-deps --wheel-dir /wheels . \
 && python3 tools/image_requirements.py --resolver pyproject.toml > /tmp/resolver.txt \
 && /opt/build/bin/pip install --quiet --no-cache-dir --no-compile --target /opt/resolver \
        -r /tmp/resolver.txt \
 && /opt/build/bin/pip install --quiet --no-cache-dir --no-compile --no-deps --target /opt/resolver \
        /wheels/*.whl

FROM build AS rootfs
RUN python3 tools/resolver_rootfs.py /opt/resolver /rootfs

FROM build AS tools-venv
RUN python3 tools/image_requirements.py pyproject.toml > /tmp/requirements.txt \
 && python3 -m venv --without-pip /opt/splitdns \
 && /opt/build/bin/pip --python /opt/splitdns/bin/python install --quiet --no-cache-dir \
        -r /tmp/requirements.txt \
 && /opt/build/bin/pip --python /opt/splitdns/bin/python install --quiet --no-cache-dir --no-deps \
        /wheels/*.whl

# The tools image: the webhook (`command: ["splitdns", "webhook"]` in its Deployment), and check,
# render, inject, doctor and explain for a CI job or `kubectl run`.
FROM ${BASE_IMAGE} AS tools
RUN command -v python3 >/dev/null \
 || { apt-get update -qq && apt-get install -y -qq --no-install-recommends python3 ca-certificates \
        && rm -rf /var/lib/apt/lists/*; }
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="splitdns-tools" \
      org.opencontainers.image.description="splitdns's admission webhook and cluster tools (check, render, inject, doctor)" \
      org.opencontainers.image.source="https://github.com/splitdns/splitdns" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=tools-venv /opt/splitdns /opt/splitdns
ENV PATH=/opt/splitdns/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 8443/tcp 8081/tcp
ENTRYPOINT ["splitdns"]
CMD ["--help"]

# The resolver image, last so that a plain `docker build .` gives it: what every pod runs.
FROM scratch AS resolver
# USER, CMD, EXPOSE and VERSION are splitdns.kube.shared.image's and splitdns.__version__: a Dockerfile
# cannot import them, so tests/test_image_defaults.py holds these lines to them.
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="splitdns" \
      org.opencontainers.image.description="An in-pod split-DNS resolver for pods with an OpenVPN sidecar" \
      org.opencontainers.image.source="https://github.com/splitdns/splitdns" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=rootfs /rootfs /
ENV PATH=/usr/bin:/bin \
    PYTHONUNBUFFERED=1
# Numeric, so the kubelet can check runAsNonRoot; the runAsUser `splitdns render` sets.
USER 65532:65532
EXPOSE 53/udp 53/tcp 8080/tcp 8181/tcp
ENTRYPOINT ["splitdns", "serve"]
CMD ["-conf", "/etc/coredns/Corefile"]
