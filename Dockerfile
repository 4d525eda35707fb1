# splitdns: the in-pod split-DNS resolver image (README.md, "The image": how to build and push it).
#
#   docker build -t REGISTRY/splitdns:VERSION .
#   podman build --build-arg BASE_IMAGE=registry.example.com/mirror/python:3.11-slim-bookworm -t ... .
#
# The entrypoint is `splitdns serve`, so a pod spec written for CoreDNS (args: ["-conf", FILE]) works
# unchanged; `splitdns verify`, `openvpn-hook`, `wireguard-shim` (which writes the resolvconf a
# WireGuard sidecar puts on wg-quick's PATH) and the admission webhook run from the same image
# (`kubectl exec ... -- splitdns verify`, or `command: ["splitdns", ...]`). Runs as a fixed uid and
# writes nothing: fine with readOnlyRootFilesystem. Binding port 53 as non-root needs the pod sysctl
# net.ipv4.ip_unprivileged_port_start=53 (what `splitdns render` emits). `make test` builds this file
# with podman and runs the image in the namespace lab as the rendered pod runs it (tests/test_image.py).

# Any Debian bookworm image with Python 3.11 (`python3`) and its venv module will do, such as a
# private mirror of the official one.
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY tools/image_requirements.py ./tools/
COPY src ./src
# The wheel is built with a throw-away pip; /opt/splitdns gets no pip at all. It holds the package
# and only what serving needs (tools/image_requirements.py: not the render/check dependencies such
# as kubernetes-validate's 100 MB of schemas, which stay on the developer's machine).
RUN python3 -m venv /opt/build \
 && /opt/build/bin/pip wheel --quiet --no-cache-dir --no-deps --wheel-dir /wheels . \
 && python3 tools/image_requirements.py pyproject.toml > /tmp/requirements.txt \
 && python3 -m venv --without-pip /opt/splitdns \
 && /opt/build/bin/pip --python /opt/splitdns/bin/python install --quiet --no-cache-dir \
        -r /tmp/requirements.txt \
 && /opt/build/bin/pip --python /opt/splitdns/bin/python install --quiet --no-cache-dir --no-deps \
        /wheels/*.whl

FROM ${BASE_IMAGE}
# USER, CMD, EXPOSE and VERSION are splitdns.kube.image's and splitdns.__version__: a Dockerfile
# cannot import them, so tests/test_image_defaults.py holds these lines to them.
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="splitdns" \
      org.opencontainers.image.description="An in-pod split-DNS resolver for pods with an OpenVPN sidecar" \
      org.opencontainers.image.source="https://github.com/splitdns/splitdns" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/splitdns /opt/splitdns
ENV PATH=/opt/splitdns/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Numeric, so the kubelet can check runAsNonRoot; the runAsUser `splitdns render` sets.
USER 65532:65532
EXPOSE 53/udp 53/tcp 8080/tcp 8181/tcp
ENTRYPOINT ["splitdns", "serve"]
CMD ["-conf", "/etc/coredns/Corefile"]
