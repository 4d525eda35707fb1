"""The grammar of the commands that read, explain and diagnose (check, explain, verify, doctor);
cli.parser holds the others and the whole, cli.vpn_hooks the scripts the VPN containers run.
Tests: tests/test_cli.py, tests/test_check.py, tests/test_verify.py.
"""

from __future__ import annotations

import argparse

from splitdns.cli.help import Parser, port_number
from splitdns.kube.shared.image import COREFILE


def add_check(commands: argparse._SubParsersAction[Parser]) -> None:
    p = commands.add_parser(
        "check", help="Lint Corefiles, Kubernetes YAML and VPN client configs together.",
        description="Read Corefiles, Kubernetes YAML (Pod, Deployment, StatefulSet, DaemonSet, Job, "
                    "CronJob, ConfigMap holding a Corefile) and VPN client configs (OpenVPN, wg-quick) "
                    "together, and "
                    "report what would break the pod's DNS, one finding per line as "
                    "FILE:LINE: CODE SEVERITY MESSAGE, each followed by why it matters and the fix. "
                    "A Corefile the resolver would refuse is reported as FILE:LINE: SD100 error MESSAGE.",
        epilog="exit codes:\n  0  no finding (or only info)\n  1  warnings, no error\n"
               "  2  at least one error (also: a bad --kube-version or command line)\n"
               "  70 internal error (a bug in splitdns, not in the files)")
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="Corefiles, Kubernetes YAML, OpenVPN client configs (.ovpn) and wg-quick configs "
                        "(.conf); `-` reads one from stdin, as inject does.")
    p.add_argument("--resolver", choices=("auto", "splitdns", "coredns"), default="auto",
                   help="The resolver the Corefiles are for; auto (default) takes it from the DNS "
                        "container's image, else splitdns. Cluster-wide Corefiles are CoreDNS's; so is, "
                        "unless splitdns is given here, one that uses the kubernetes plugin.")
    p.add_argument("--kube-version", metavar="MAJOR.MINOR",
                   help="Also validate the manifests, offline and strictly (unknown fields fail), "
                        "against this Kubernetes version's schema, for example 1.33.")
    p.add_argument("--format", choices=("text", "json"), default="text", dest="output",
                   help="text (default) or json: a list of {file, line, code, severity, message, why, fix}.")
    p.add_argument("--brief", action="store_true",
                   help="Text output without the why and fix lines.")


def add_explain(commands: argparse._SubParsersAction[Parser]) -> None:
    p = commands.add_parser(
        "explain", help="Say which block, forward and upstreams answer a name, and why.",
        description="Say which server block answers NAME, which forward and upstreams, and why (a zone "
                    "owns a name only when it is the name's last whole labels), also for names no "
                    "block owns.",
        epilog="exit codes:\n  0  explained\n  2  the Corefile cannot be read or parsed\n"
               "  70 internal error (a bug in splitdns)")
    p.add_argument("name", metavar="NAME", help="The name to explain, or an address (its reverse name).")
    p.add_argument("-conf", "--conf", "--corefile", dest="conf", default="Corefile", metavar="FILE",
                   help="The Corefile (default ./Corefile), or the ConfigMap YAML that holds one.")
    p.add_argument("-dns.port", "--dns-port", dest="port", type=port_number, default=53,
                   help="The listener port to explain (default 53).")


def add_verify(commands: argparse._SubParsersAction[Parser]) -> None:
    p = commands.add_parser(
        "verify", help="Check both zones, the pod spec and the TCP path; write an artifact for the ticket.",
        description="Run the verification procedure: ask each name through 127.0.0.1 (and, when it "
                    "fails, its zone's upstream directly), read the pod's resolv.conf, check the "
                    "TCP paths, and give one verdict that separates a naming problem from a routing "
                    "problem. Locally (inside the pod or any network namespace), or in a running pod "
                    "through kubectl; with --replace, the pod is deleted and the checks run again in "
                    "its replacement. `splitdns verify leaks` shows where the tunnel zones' queries "
                    "leave (see its --help).",
        epilog="exit codes (one per verdict):\n"
               "  0  all good\n  1  could not run (bad arguments, kubectl failed)\n"
               "  2  the resolver is not answering (on 127.0.0.1, or --port)\n"
               "  3  naming problem in a zone: its DNS server answers, but not with that name\n"
               "  4  the tunnel is down (the resolver says so)\n"
               "  5  routing: names resolve but connections time out, or a zone's DNS server does "
               "not answer and cannot be reached\n"
               "  6  the pod spec is wrong (worked before the replacement and not after, or the "
               "pod's resolv.conf does not name only 127.0.0.1)\n"
               "  7  names resolve, the service refuses connections (or a zone's DNS server's host "
               "refuses its port)\n"
               "  70 internal error (a bug in splitdns)")
    p.add_argument("target", nargs="?", metavar="TARGET",
                   help="A pod to run in, as for --kubectl (deploy/app, pod/NAME): `kubectl splitdns "
                        "verify deploy/app`.")
    p.add_argument("--name", action="append", default=[], dest="names", metavar="NAME",
                   help="A name to resolve (repeat; default kubernetes.default.svc.cluster.local).")
    p.add_argument("--tcp", action="append", default=[], metavar="HOST:PORT",
                   help="A TCP path to try once names resolve, e.g. db.svc.acme.internal:5432.")
    p.add_argument("-conf", "--conf", "--corefile", dest="conf", metavar="FILE",
                   help=f"The Corefile, for the resolver's view of who owns each name (in the pod: "
                        f"{COREFILE}).")
    p.add_argument("--port", type=port_number, default=53,
                   help="The resolver's port on 127.0.0.1 (default 53).")
    p.add_argument("--resolv-conf", default="/etc/resolv.conf", help="The resolv.conf to report.")
    p.add_argument("--out", metavar="PATH", help="Write the artifact as PATH.md and PATH.json "
                   "(or into the directory PATH/).")
    p.add_argument("--kubectl", metavar="TARGET", help="Run in a pod instead: deploy/app, pod/NAME, ...")
    p.add_argument("-n", "--namespace", help="The pod's namespace (cluster mode; default: kubectl's "
                   "current namespace).")
    p.add_argument("-c", "--container", help="The container to exec in (cluster mode; it needs splitdns; "
                   "default: splitdns, the name inject and the webhook give it, else dns, the name render "
                   "gives it).")
    p.add_argument("--replace", action="store_true", help="Cluster mode: delete the pod, wait for its "
                   "replacement to be ready, and check again.")
    p.add_argument("--timeout", type=int, default=90, help="Seconds to wait for the replacement.")
    p.add_argument("--emit-observation", action="store_true", dest="emit", help=argparse.SUPPRESS)


def add_doctor(commands: argparse._SubParsersAction[Parser]) -> None:
    p = commands.add_parser(
        "doctor", help="List pods that asked for the resolver and run without it, or with old settings.",
        description="Read the cluster (namespaces, pods labelled splitdns.dev/inject=true, the webhook's "
                    "Deployment) through --kubeconfig, in-cluster credentials, $KUBECONFIG or "
                    "~/.kube/config, and list the pods that asked for the resolver and were not injected "
                    "(created while the webhook was down: failurePolicy Ignore let them start with plain "
                    "cluster DNS), whose namespace is not enabled, or that were injected with settings "
                    "older than the webhook's.",
        epilog="exit codes:\n  0  nothing to report\n  1  findings (listed)\n"
               "  2  the cluster could not be read")
    p.add_argument("--kubeconfig", metavar="FILE", help="The kubeconfig to use.")
    p.add_argument("--context", help="The kubeconfig context (default: the current one).")
    p.add_argument("--webhook-namespace", default="splitdns-system",
                   help="Where the webhook runs (default splitdns-system).")
