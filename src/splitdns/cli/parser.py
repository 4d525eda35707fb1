"""The command line's grammar: every command, its flags and its help texts (argparse lives in
splitdns.cli and only there; running a command is splitdns.cli's).
Tests: tests/test_cli.py, tests/test_first_commands.py.
"""

from __future__ import annotations

import argparse

from splitdns import __version__
from splitdns.cli.diagnostics import add_check, add_doctor, add_explain, add_verify
from splitdns.cli.help import Parser
from splitdns.cli.help import port_number as _port
from splitdns.cli.pod_options import add_vpn
from splitdns.cli.top import add_top
from splitdns.cli.vpn_hooks import add_openconnect_hook, add_openvpn_hook, add_wireguard_shim
from splitdns.kube.deploy import sizing
from splitdns.kube.shared.image import DEFAULT_IMAGE

EXIT_INTERNAL = 70  # EX_SOFTWARE (sysexits.h): not 1 or 2, which commands use for findings and bad input
EXIT_MISSING = 69   # EX_UNAVAILABLE: a module this command needs is not installed
EXIT_PIPE = 141     # 128 + SIGPIPE, what a shell reports for a writer whose reader went away


def _rate(text: str) -> int:
    """A rate a second, 1 or more (the upper bound is the sizing's own, with its reason)."""
    try:
        rate = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text} is not a whole number a second") from None
    if rate < 1:
        raise argparse.ArgumentTypeError(f"{rate}: give 1 or more a second")
    return rate


def _add_expected_qps(p: argparse.ArgumentParser) -> None:
    p.add_argument("--expected-qps", type=_rate, default=sizing.TYPICAL_QPS, metavar="N",
                   help=f"The DNS queries a second one pod asks, which the DNS container's CPU request is "
                        f"sized for: {sizing.DNS_MILLICORES_PER_1000_QPS}m per 1,000 q/s as `make bench` "
                        f"measured a pod's mix, a quarter more, at least {sizing.MIN_MILLICORES}m "
                        f"(default {sizing.TYPICAL_QPS}: a busy app pod; most ask fewer).")


def build_parser(prog: str = "splitdns") -> argparse.ArgumentParser:
    """Every command, its flags and its help texts; `prog` is how the user called us."""
    parser = Parser(
        prog=prog,
        description="An in-pod split-DNS resolver for pods with a VPN sidecar (OpenVPN, WireGuard, "
                    "OpenConnect or strongSwan).",
        epilog=f"exit codes common to every command:\n  {EXIT_INTERNAL}  internal error: a bug in "
               "splitdns, not in your input; one line names the input and the error (the traceback "
               "with --debug or SPLITDNS_DEBUG=1). Please report it.\n"
               f"  {EXIT_MISSING}  a module the command needs is not installed (the message says what "
               "to install)\n"
               f"  {EXIT_PIPE} the output's reader went away (`| head`): the command stopped quietly",
    )
    parser.add_argument("--version", action="version", version=f"splitdns {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="On an internal error, print the traceback (also: SPLITDNS_DEBUG=1).")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    commands.required = True

    p = commands.add_parser("serve", help="Run the resolver configured by a Corefile.",
        description="Run the resolver configured by a Corefile. Accepts CoreDNS's -conf and "
                    "-dns.port, so a pod spec written for CoreDNS works unchanged.",
        epilog="exit codes:\n  0  stopped cleanly\n  1  could not start (port in use, ...)\n"
               "  2  bad Corefile\n  70 internal error (a bug in splitdns)")
    p.add_argument("-conf", "--conf", "--corefile", dest="conf", default="Corefile", metavar="FILE",
                   help="The Corefile to load (default: ./Corefile).")
    p.add_argument("-dns.port", "--dns-port", dest="port", type=_port, default=None,
                   help="The port of server blocks whose keys name none (default: 53).")
    p.add_argument("--corefile-env", metavar="NAME",
                   help="Read the Corefile's text from the environment variable NAME instead of a file "
                        "(what `splitdns inject` and the webhook give the resolver; no reload).")

    p = commands.add_parser(
        "demo", help="Run the resolver with built-in upstreams on loopback, to try with dig.",
        description="Run the resolver on 127.0.0.1 with two small built-in upstreams on "
                    "loopback addresses, in the layout of a pod with a VPN sidecar (a catch-all and "
                    "the tunnel zone svc.acme.internal); ask it the example queries and print the "
                    "answers, then the dig commands to try.")
    p.add_argument("--port", type=_port, default=None,
                   help="Port on 127.0.0.1 (default 53, or 5300 if 53 is taken; a port given here is "
                        "that port or an error).")

    add_check(commands)
    _add_render(commands)
    add_explain(commands)
    add_openvpn_hook(commands)
    add_wireguard_shim(commands)
    add_openconnect_hook(commands)
    add_verify(commands)
    _add_inject(commands)
    _add_webhook(commands)
    add_doctor(commands)
    add_top(commands)
    return parser


def _add_render(commands: argparse._SubParsersAction[Parser]) -> None:
    p = commands.add_parser(
        "render", help="Write the Kubernetes manifests for the in-pod resolver.",
        description="First: the splitdns image is not published. Build it from the repository's "
                    "Dockerfile and push it where your cluster pulls from (docker build -t "
                    "REGISTRY/splitdns:VERSION . && docker push REGISTRY/splitdns:VERSION), then pass "
                    "--image REGISTRY/splitdns:VERSION; the default name below pulls nothing. "
                    "Writes what a user applies: the ConfigMap holding the Corefile and the pod-spec "
                    "changes (dnsPolicy None, nameserver 127.0.0.1, the namespace's search list), "
                    "with the DNS container as a native sidecar. --form deployment (default) gives a "
                    "full example Deployment (app, vpn, dns); --form component a kustomize Component "
                    "that adds the DNS part to an existing Deployment. --cluster-wide writes instead "
                    "the server block to add to the cluster's CoreDNS, for the private zones only.",
        epilog="exit codes:\n  0  written\n  1  the kube-dns Service could not be read\n"
               "  2  the inputs are incomplete or wrong (the message says what to add)\n"
               "  70 internal error (a bug in splitdns)")
    p.add_argument("--zone", action="append", default=[], dest="zones", metavar="ZONE=UPSTREAM[,UPSTREAM]",
                   help="A zone and its upstream addresses, or ZONE=openvpn for the DNS the VPN "
                        "pushes (ZONE=wireguard: the DNS = line of the wg-quick config), learned at "
                        "run time. Repeat for each zone.")
    p.add_argument("--corefile", "-conf", "--conf", dest="corefile", metavar="FILE",
                   help="Take zones and upstreams from an existing Corefile "
                   "(or the ConfigMap YAML that holds one).")
    _add_cluster_dns(p)
    p.add_argument("--probe", action="append", default=[], dest="probes", metavar="ZONE=NAME",
                   help="The name the readiness of ZONE asks (default: the zone's apex; "
                        "kubernetes.default.svc.CLUSTER_DOMAIN for the cluster zone).")
    p.add_argument("-n", "--namespace", default="default", help="The pod's namespace, for its search list "
                   "(--form monitoring: where the monitoring resources go).")
    p.add_argument("--cluster-domain", default="cluster.local", help="The cluster domain.")
    p.add_argument("--ndots", type=int, default=5, help="The ndots option (default 5, as the cluster).")
    p.add_argument("--resolver", choices=("splitdns", "coredns"), default="splitdns",
                   help="The DNS container: splitdns (our image) or coredns (the CoreDNS image).")
    p.add_argument("--sidecar", choices=("native", "classic"), default="native",
                   help="native (default; initContainers with restartPolicy Always, Kubernetes >= 1.29) "
                        "or classic (a regular container).")
    form = p.add_mutually_exclusive_group()
    form.add_argument("--form", choices=("deployment", "component", "webhook", "monitoring"),
                      default="deployment", help="deployment (default): a full example; component: a "
                      "kustomize Component; webhook: the admission webhook that injects the resolver into "
                      "labelled pods (with cert-manager); monitoring: alerts, a PodMonitor, a ServiceMonitor "
                      "for the webhook and a Grafana dashboard, in --namespace (docs/monitoring.md).")
    form.add_argument("--cluster-wide", action="store_const", const="cluster-wide", dest="form",
                      help="The server block to add to kube-system/coredns instead (not recommended).")
    p.add_argument("--name", default="app", help="The Deployment's name (default app).")
    p.add_argument("--image", default=DEFAULT_IMAGE,
                   help="The splitdns image you built and pushed; the default is a name, not a published "
                        "image.")
    p.add_argument("--coredns-image", default="coredns/coredns:1.12.1", help="The CoreDNS image.")
    p.add_argument("--app-image", default="your-app-image", help="The app image of the full example.")
    add_vpn(p)
    p.add_argument("--openvpn-management", default="127.0.0.1:7505", dest="management", metavar="ADDR:PORT",
                   help="Where the resolver reads the VPN's pushed DNS (default 127.0.0.1:7505).")
    p.add_argument("--output-dir", metavar="DIR", help="Write the files into DIR instead of stdout.")
    p.add_argument("--webhook-namespace", default="splitdns-system",
                   help="--form webhook: the webhook's own namespace (default splitdns-system).")
    _add_expected_qps(p)
    p.add_argument("--webhook-review-rate", type=_rate, default=sizing.TYPICAL_REVIEW_RATE, metavar="N",
                   help=f"--form webhook: the pod creations a second each webhook replica's CPU request "
                        f"is sized for ({sizing.WEBHOOK_CPU_MS_PER_REVIEW:g} ms of CPU per review, a "
                        f"quarter more; default {sizing.TYPICAL_REVIEW_RATE}, the controller manager's "
                        "default API rate).")


def _add_cluster_dns(p: argparse.ArgumentParser) -> None:
    """The cluster DNS address, given or read from the cluster (render, inject)."""
    cluster = p.add_mutually_exclusive_group()
    cluster.add_argument("--cluster-dns", metavar="IP",
                         help="The cluster DNS address (kubectl -n kube-system get svc kube-dns).")
    cluster.add_argument("--cluster-dns-from-cluster", action="store_true", dest="from_cluster",
                         help="Read it from the kube-dns Service in kube-system, through --kubeconfig, "
                              "in-cluster credentials, $KUBECONFIG or ~/.kube/config.")
    p.add_argument("--kubeconfig", metavar="FILE", help="The kubeconfig to read the cluster DNS with.")
    p.add_argument("--context", help="The kubeconfig context (default: the current one).")


def _add_plan(p: argparse.ArgumentParser, corefile: bool = True) -> None:
    """The settings an injection carries: zones, cluster DNS, search list, image, sidecar kind.
    `corefile` False for the webhook: its image cannot read YAML, and its zones come spelled out."""
    p.add_argument("--zone", action="append", default=[], dest="zones", metavar="ZONE=UPSTREAM[,UPSTREAM]",
                   help="A zone and its upstream addresses, or ZONE=openvpn for the DNS the VPN "
                        "pushes (ZONE=wireguard: the DNS = line of the wg-quick config), learned at "
                        "run time. Repeat for each zone.")
    if corefile:
        p.add_argument("--corefile", "-conf", "--conf", dest="corefile", metavar="FILE",
                       help="Take zones and upstreams from an existing Corefile.")
    if corefile:  # inject: where render runs, with a kubeconfig at hand
        _add_cluster_dns(p)
    else:  # the webhook: its image has no Kubernetes client, and render spells the address out
        p.add_argument("--cluster-dns", metavar="IP",
                       help="The cluster DNS address (kubectl -n kube-system get svc kube-dns).")
    p.add_argument("--probe", action="append", default=[], dest="probes", metavar="ZONE=NAME",
                   help="The name the readiness of ZONE asks (default: the zone's apex).")
    p.add_argument("--cluster-domain", default="cluster.local", help="The cluster domain.")
    p.add_argument("--ndots", type=int, default=5,
                   help="ndots for pods that set none (default 5); a pod's splitdns.dev/ndots "
                        "annotation wins.")
    p.add_argument("--sidecar", choices=("native", "classic"), default="native",
                   help="native (default; first init container with restartPolicy Always, Kubernetes "
                        ">= 1.29) or classic (first regular container, for older clusters).")
    p.add_argument("--image", default=DEFAULT_IMAGE, help="The splitdns image.")
    add_vpn(p)
    p.add_argument("--openvpn-management", default="127.0.0.1:7505", dest="management", metavar="ADDR:PORT",
                   help="Where the resolver reads the VPN's pushed DNS (default 127.0.0.1:7505).")
    _add_expected_qps(p)


def _add_inject(commands: argparse._SubParsersAction[Parser]) -> None:
    p = commands.add_parser(
        "inject", help="Inject the resolver into the pod templates of Kubernetes YAML.",
        description="Read Kubernetes YAML (files, or stdin when none or `-`; several documents; Pod, "
                    "Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob, and List) and write "
                    "it to stdout with the resolver injected into every pod template, as the admission "
                    "webhook would. Other documents, and workloads left alone, are written back byte "
                    "for byte; an injected document is rewritten, so its comments are lost. Injecting "
                    "twice gives the same as once.",
        epilog="exit codes:\n  0  every pod template injected (or already)\n"
               "  1  some were left alone (the reasons on stderr), or none was found\n"
               "  2  bad input or settings (the message says what)")
    p.add_argument("files", nargs="*", metavar="FILE",
                   help="A YAML file to inject, or `-` for stdin (the default when none is given).")
    p.add_argument("--namespace", "-n", default="default",
                   help="The namespace of objects that name none, for their search list (default default).")
    _add_plan(p)


def _add_webhook(commands: argparse._SubParsersAction[Parser]) -> None:
    p = commands.add_parser(
        "webhook", help="Serve the admission webhook that injects the resolver into new pods.",
        description="Serve AdmissionReview v1 over HTTPS (POST /mutate) for pod CREATE: pods labelled "
                    "splitdns.dev/inject=true get the same injection as `splitdns inject`, as a JSONPatch. "
                    "A pod that cannot take it is admitted unchanged, with the reason as a warning. "
                    "/healthz, /readyz and /metrics on the plain-HTTP probe port. The certificate files "
                    "are re-read when they change. Needs the `webhook` extra (pip install "
                    "'splitdns[webhook]').",
        epilog="exit codes:\n  0  stopped by SIGTERM or SIGINT\n  1  could not start (port, certificate)\n"
               "  2  bad settings (the message says what)")
    p.add_argument("--tls-cert", required=True, dest="cert", metavar="FILE",
                   help="The serving certificate (PEM).")
    p.add_argument("--tls-key", required=True, dest="key", metavar="FILE", help="Its private key (PEM).")
    p.add_argument("--listen", default="0.0.0.0", dest="host",
                   help="The address to listen on; 0.0.0.0 is every IPv4 address of the pod.")
    p.add_argument("--port", type=int, default=8443, help="The HTTPS port for reviews (default 8443).")
    p.add_argument("--probe-port", type=int, default=8080, help="The plain-HTTP port for probes and metrics.")
    p.add_argument("--cert-poll", type=float, default=10.0, metavar="SECONDS",
                   help="How often to look at the certificate files for a change (default 10).")
    p.add_argument("--read-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="How long a client may take to send a review's body (default 10).")
    p.add_argument("--idle-timeout", type=float, default=120.0, metavar="SECONDS",
                   help="Close a connection idle, or stuck in its headers, this long (default 120, above "
                        "the 90 s after which the API server's HTTP client drops idle connections).")
    p.add_argument("--shutdown-delay", type=float, default=5.0, metavar="SECONDS",
                   help="After SIGTERM, how long to go on serving while /readyz fails (default 5).")
    p.add_argument("-n", "--namespace", default="splitdns-system",
                   help="The webhook's own namespace, never injected (default splitdns-system).")
    _add_plan(p, corefile=False)
