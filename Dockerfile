# splitdns: the in-pod split-DNS resolver image. Not built on the development machine (no container
# engine there); see docs/kubernetes.md for what was tested instead.
#
#   docker build -t ghcr.io/splitdns/splitdns:0.1.0 .
#
# The entrypoint is `splitdns serve`, so a pod spec written for CoreDNS (args: ["-conf", FILE]) works
# unchanged. Runs as uid 65532, writes nothing: fine with readOnlyRootFilesystem. Binding port 53 as
# non-root needs the pod sysctl net.ipv4.ip_unprivileged_port_start=53 (what `splitdns render` emits).

FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
 && python -m venv /opt/splitdns \
 # The image only serves: the resolver's own dependencies, not the render/check ones (PyYAML,
 # kubernetes-validate's 100 MB of schemas, lightkube), which stay on the developer's machine.
 # tests/test_image.py keeps this list equal to pyproject's serving dependencies.
 && /opt/splitdns/bin/pip install --no-cache-dir "dnspython>=2.9.1,<3" "prometheus_client>=0.20" "uvloop>=0.19" \
 && /opt/splitdns/bin/pip install --no-cache-dir --no-deps /wheels/*.whl \
 && /opt/splitdns/bin/pip uninstall --yes pip setuptools

FROM python:3.11-slim-bookworm
COPY --from=build /opt/splitdns /opt/splitdns
ENV PATH=/opt/splitdns/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 53/udp 53/tcp 8080/tcp 8181/tcp
ENTRYPOINT ["splitdns", "serve"]
CMD ["-conf", "/etc/coredns/Corefile"]
