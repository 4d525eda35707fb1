"""The command line: argparse lives here and only here (the grammar in cli.parser, the help and
did-you-mean in cli.help); each command returns an exit code, and a bug of ours gets its own.
Tests: tests/test_cli.py, tests/test_first_commands.py.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from splitdns.cli.help import reject_unrecognized
from splitdns.cli.parser import EXIT_INTERNAL, EXIT_MISSING, EXIT_PIPE, build_parser

if TYPE_CHECKING:
    from splitdns.kube.deploy.inject import Settings

__all__ = ["EXIT_INTERNAL", "RUNNERS", "build_parser", "internal_error", "kubectl_plugin", "main"]


# Each command imports its module when it runs: `splitdns serve` must not pay, in start-up time
# and memory, for what render, check or verify import (YAML, schemas, an HTTP client).
def _serve(a: argparse.Namespace) -> int:
    from splitdns.commands import serve

    if a.corefile_env is not None:
        return serve.run_from_env(a.corefile_env, a.port)
    return serve.run(a.conf, a.port)


def _demo(a: argparse.Namespace) -> int:
    from splitdns.commands import demo

    return demo.run(a.port)


def _check(a: argparse.Namespace) -> int:
    from splitdns.commands import check

    return check.run(a.files, a.resolver, a.kube_version, a.output, not a.brief)


def _webhook_settings(flags: list[str], namespace: str) -> Settings:
    """The settings `splitdns webhook FLAGS` runs with (its ownership record names its own flags)."""
    from splitdns.commands import render

    args = build_parser().parse_args(["webhook", "--tls-cert", "-", "--tls-key", "-", *flags])
    fields = {k: v for k, v in vars(args).items() if k in render.Request.__dataclass_fields__
              and k != "namespace"}
    return render.injection_settings(render.Request(**fields, reads_cluster=False), excluded=(namespace,))


def _render(a: argparse.Namespace) -> int:
    from splitdns.commands import render

    fields = {k: v for k, v in vars(a).items() if k in render.Request.__dataclass_fields__}
    return render.run(render.Request(**fields), _webhook_settings)


def _explain(a: argparse.Namespace) -> int:
    from splitdns.commands import explain

    return explain.run(a.name, a.conf, a.port)


def _openvpn_hook(a: argparse.Namespace) -> int:
    from splitdns.commands import openvpn_hook

    return openvpn_hook.run(a.state)


def _openconnect_hook(a: argparse.Namespace) -> int:
    from splitdns.commands import openconnect_hook

    return openconnect_hook.run(a.dir)


def _wireguard_shim(a: argparse.Namespace) -> int:
    from splitdns.commands import wireguard_shim

    return wireguard_shim.run(a.dir)


def _verify(a: argparse.Namespace) -> int:
    from splitdns.commands import verify

    return verify.run(verify.Options(
        names=a.names, tcp=a.tcp, port=a.port, conf=a.conf, resolv_conf=a.resolv_conf, out=a.out,
        emit=a.emit, kubectl=a.kubectl or a.target, namespace=a.namespace, container=a.container,
        replace=a.replace, timeout=a.timeout))


def _inject(a: argparse.Namespace) -> int:
    from splitdns.commands import inject, render

    fields = {k: v for k, v in vars(a).items() if k in render.Request.__dataclass_fields__}
    return inject.run(render.Request(**fields), a.files)


def _webhook(a: argparse.Namespace) -> int:
    from splitdns.commands import render, webhook
    from splitdns.kube.deploy.plan import PlanError

    for module in ("aiohttp", "jsonpatch"):  # the extra first: before certificates and settings
        if importlib.util.find_spec(module) is None:
            raise ModuleNotFoundError(f"No module named {module!r}", name=module)

    fields = {k: v for k, v in vars(a).items() if k in render.Request.__dataclass_fields__}
    fields.pop("namespace", None)
    try:
        settings = render.injection_settings(render.Request(**fields, reads_cluster=False),
                                             excluded=(a.namespace,))
    except PlanError as err:
        print(f"splitdns webhook: {err}", file=sys.stderr)
        return webhook.EXIT_INPUT
    options = webhook.Options(cert=a.cert, key=a.key, host=a.host, port=a.port, probe_port=a.probe_port,
                              cert_poll=a.cert_poll, read_timeout=a.read_timeout,
                              idle_timeout=a.idle_timeout,
                              shutdown_delay=a.shutdown_delay)
    return webhook.run(settings, options)


def _doctor(a: argparse.Namespace) -> int:
    from splitdns.commands import doctor

    return doctor.run(a.kubeconfig, a.context, a.webhook_namespace)


def _top(a: argparse.Namespace) -> int:
    from splitdns.commands import top

    return top.run(top.Options(url=a.url, interval=a.interval, once=a.once, pod=a.pod,
                               namespace=a.namespace, kubectl=a.kubectl))


# What each command of the parser runs, by the command's name.
RUNNERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "serve": _serve, "demo": _demo, "check": _check, "render": _render, "explain": _explain,
    "openvpn-hook": _openvpn_hook, "verify": _verify, "inject": _inject, "webhook": _webhook,
    "doctor": _doctor, "wireguard-shim": _wireguard_shim, "openconnect-hook": _openconnect_hook,
    "top": _top,
}


# Modules only some commands import, and how to get them: their absence is the install's, not a bug.
_WEBHOOK_EXTRA = "the `webhook` extra: pip install 'splitdns[webhook]'"
_TOP_EXTRA = "the `top` extra: pip install 'splitdns[top]'"
_KUBE_TOOLS = ("render, check, explain, inject and doctor's dependencies, which the resolver image "
               "leaves out: run them from the tools image (REGISTRY/splitdns-tools, the Dockerfile's "
               "tools target) or where splitdns is installed with pip (pip install splitdns)")
OPTIONAL_MODULES = {
    "aiohttp": _WEBHOOK_EXTRA, "jsonpatch": _WEBHOOK_EXTRA, "rich": _TOP_EXTRA,
    "yaml": _KUBE_TOOLS, "kubernetes_validate": _KUBE_TOOLS, "lightkube": _KUBE_TOOLS,
}


def main(argv: Sequence[str] | None = None, prog: str = "splitdns") -> int:
    try:
        return _main(argv, prog)
    except BrokenPipeError:
        return _reader_gone()


def _main(argv: Sequence[str] | None, prog: str) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:2] == ["verify", "leaks"]:
        from splitdns.cli import leaks

        return leaks.main(words[2:], prog)
    parser = build_parser(prog)
    args, unknown = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    if unknown:
        reject_unrecognized(parser, args.command, unknown)
    if getattr(args, "target", None) and args.kubectl:
        parser.error("verify: give the pod once, as TARGET or as --kubectl")
    try:
        code = RUNNERS[args.command](args)
        sys.stdout.flush()  # a closed pipe shows here, while we can still say nothing about it
        return code
    except BrokenPipeError:
        raise
    except ModuleNotFoundError as err:
        missing = (err.name or "").partition(".")[0]
        if missing not in OPTIONAL_MODULES:
            return _internal(args, err)
        print(f"splitdns {args.command}: the module {missing} is not installed; it comes with "
              f"{OPTIONAL_MODULES[missing]}", file=sys.stderr)
        return EXIT_MISSING
    except Exception as err:  # a bug of ours: say so in one line, with its own exit code
        return _internal(args, err)


def _internal(args: argparse.Namespace, err: Exception) -> int:
    if args.debug or os.environ.get("SPLITDNS_DEBUG", "") not in ("", "0"):
        traceback.print_exc()
    print(internal_error(args, err), file=sys.stderr)
    return EXIT_INTERNAL


def _reader_gone() -> int:
    """`splitdns explain ... | head -1`: the reader left, which is no error of anyone's. Point stdout
    at /dev/null so that the interpreter's last flush does not complain either."""
    with contextlib.suppress(OSError, ValueError, AttributeError):  # a stdout with no file behind it
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return EXIT_PIPE


def kubectl_plugin() -> int:
    """`kubectl-splitdns` on PATH makes `kubectl splitdns ...` run splitdns (krew-style plugins)."""
    return main(prog="kubectl splitdns")


def internal_error(args: argparse.Namespace, err: BaseException) -> str:
    """One line: the command, the input it was reading, what went wrong, where to look next."""
    inputs = [str(x) for name in ("files", "conf", "corefile", "state") for x in _listed(args, name)]
    what = f" while reading {', '.join(inputs)}" if inputs else ""
    detail = " ".join(str(err).split()) or "no message"
    return (f"splitdns {args.command}: internal error{what}: {type(err).__name__}: {detail} "
            f"(a bug in splitdns; exit {EXIT_INTERNAL}; rerun with --debug or SPLITDNS_DEBUG=1 for the "
            "traceback and report it)")


def _listed(args: argparse.Namespace, name: str) -> list[object]:
    value = getattr(args, name, None)
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]
