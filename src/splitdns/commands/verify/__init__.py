"""`splitdns verify`: the verification procedure (naming or routing?), with a verdict and an
artifact for the ticket.

Local mode runs the checks here (inside the pod, or any network namespace). Cluster mode
runs the same checks inside the pod through `kubectl exec`, replaces the pod, waits for
the new one, and runs them again: a configuration that only lives in a running container
is not a configuration.
Tests: tests/test_verify.py, tests/test_verify_lab.py.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from splitdns import config
from splitdns.commands.verify import checks, diagnosis, leaks
from splitdns.errors import ConfigError

DEFAULT_NAME = "kubernetes.default.svc.cluster.local"
EXIT_USAGE = 1


@dataclass
class Options:
    names: list[str]
    tcp: list[str]
    server: str = "127.0.0.1"
    port: int = 53
    conf: str | None = None
    resolv_conf: str = "/etc/resolv.conf"
    out: str | None = None
    emit: bool = False                 # print the raw observation as JSON (cluster mode's inner call)
    kubectl: str | None = None
    namespace: str | None = None
    container: str | None = None
    replace: bool = False
    timeout: int = 90
    kubectl_bin: str = "kubectl"


@dataclass
class Run:
    """What one phase saw: the observation plus the transcripts for the ticket."""

    observation: diagnosis.Observation
    transcripts: list[str] = field(default_factory=list)
    views: list[str] = field(default_factory=list)
    started: str = ""
    leaks: list[str] = field(default_factory=list)  # where the tunnel zones' queries leave (leaks.py)


def run(opts: Options) -> int:
    opts.names = opts.names or [DEFAULT_NAME]
    try:
        runs = _cluster(opts) if opts.kubectl else [_local(opts, "local")]
    except (RuntimeError, ConfigError) as err:
        print(f"splitdns verify: {err}", file=sys.stderr)
        return EXIT_USAGE
    if opts.emit:
        print(json.dumps(_run_to_json(runs[0])))
        return 0
    verdict = diagnosis.diagnose([r.observation for r in runs])
    markdown = render_markdown(runs, verdict)
    print(_summary(verdict))
    for run in runs:
        if run.leaks:
            print(f"  tunnel zones ({run.observation.phase}): {run.leaks[0]}")
    try:
        paths = _write(opts.out, markdown, _to_json(runs, verdict))
    except OSError as err:
        print(f"splitdns verify: cannot write the artifact {opts.out}: {err.strerror} "
              f"({err.filename or opts.out})", file=sys.stderr)
        return EXIT_USAGE
    for path in paths:
        print(f"artifact: {path}")
    return verdict.exit_code


def _local(opts: Options, phase: str) -> Run:
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    cfg = config.load(opts.conf, read_files=False) if opts.conf else None
    try:
        resolv = Path(opts.resolv_conf).read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        resolv = f"# cannot read {opts.resolv_conf}: {err.strerror}\n"
    names, transcripts, views = [], [], []
    for name in opts.names:
        check, texts = checks.check_name(name, opts.server, opts.port, cfg, _progress)
        names.append(check)
        transcripts += texts
        views.append(_view(check, cfg))
    answered = any(c.rcode is not None for c in names)
    by_name = {c.name.rstrip(".") + ".": c for c in names}
    tcp = [checks.check_tcp(t, by_name, opts.server, opts.port) for t in opts.tcp] if answered else []
    obs = diagnosis.Observation(phase, resolv, answered, tuple(names), tuple(tcp), opts.server, opts.port)
    found = leaks.section(cfg, opts.server, opts.port) if cfg is not None and answered else []
    return Run(obs, transcripts, views, started, found)


def _progress(line: str) -> None:
    """A zone whose server does not answer costs seconds: say what verify waits on, on stderr, so the
    verdict and the artifact's paths stay alone on stdout."""
    print(f"verify: {line}", file=sys.stderr, flush=True)


def _view(check: diagnosis.NameCheck, cfg: config.Config | None) -> str:
    if cfg is None:
        return f"{check.name}: no Corefile given (-conf), owner unknown"
    if check.zone is None:
        return f"{check.name}: no block owns it: the resolver answers REFUSED"
    ups = ", ".join(check.upstreams) or "the servers the VPN pushes (learned at run time)"
    return f"{check.name}: block {check.zone} -> forward to {ups}"


# -- cluster mode -------------------------------------------------------------------------------

def _cluster(opts: Options) -> list[Run]:
    runs = [_remote(opts, "before replacement" if opts.replace else "in the running pod")]
    if opts.replace:
        pod = _exec(opts, ["cat", "/proc/sys/kernel/hostname"]).strip()
        _kubectl(opts, ["delete", "pod", *_ns(opts), pod, "--wait=true"])
        _kubectl(opts, ["rollout", "status", *_ns(opts), opts.kubectl or "", f"--timeout={opts.timeout}s"])
        runs.append(_remote(opts, "after replacement"))
    return runs


def _remote(opts: Options, phase: str) -> Run:
    inner = ["splitdns", "verify", "--emit-observation", "--port", str(opts.port)]
    for name in opts.names:
        inner += ["--name", name]
    for target in opts.tcp:
        inner += ["--tcp", target]
    if opts.conf:
        inner += ["-conf", opts.conf]
    _progress(f"{phase}: running the checks in {opts.kubectl} (kubectl exec) ...")
    out = _exec(opts, inner)
    try:
        run = _run_from_json(json.loads(out))
    except (ValueError, KeyError, TypeError) as err:
        raise RuntimeError(f"the pod's splitdns verify printed something unexpected: {err}") from None
    run.observation = dataclasses.replace(run.observation, phase=phase)
    return run


# The resolver's container, unless -c names it: what inject and the webhook call it, then what
# render calls it (its Corefile mounted from a ConfigMap). kubectl's own default is the app's.
CONTAINERS = ("splitdns", "dns")


def _exec(opts: Options, command: list[str]) -> str:
    """`kubectl exec` in the resolver's container; without -c, the first of CONTAINERS the pod has
    (remembered in `opts` for the later calls)."""
    target = opts.kubectl or ""
    if opts.container:
        return _kubectl(opts, ["exec", *_where(opts), target, "--", *command])
    for name in CONTAINERS:
        try:
            out = _kubectl(opts, ["exec", *_ns(opts), "-c", name, target, "--", *command])
        except RuntimeError as err:
            if not _no_such_container(str(err)):
                raise
            continue
        opts.container = name
        return out
    raise RuntimeError(f"{target} has no container named {' or '.join(CONTAINERS)}: name the one "
                       "that runs splitdns with -c")


def _no_such_container(error: str) -> bool:
    """kubectl's words for a container the pod lacks ("container not found", "is not valid")."""
    text = error.lower()
    return "container" in text and ("not found" in text or "not valid" in text)


def _ns(opts: Options) -> list[str]:
    return ["-n", opts.namespace] if opts.namespace else []


def _where(opts: Options) -> list[str]:
    return _ns(opts) + (["-c", opts.container] if opts.container else [])


def _kubectl(opts: Options, args: list[str]) -> str:
    command = [opts.kubectl_bin, *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=opts.timeout + 30)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{' '.join(command)}: no answer within {opts.timeout + 30} s") from None
    except FileNotFoundError:
        raise RuntimeError(f"{opts.kubectl_bin} not found: cluster mode runs kubectl; put it on PATH") \
            from None
    except OSError as err:
        raise RuntimeError(f"{' '.join(command)}: {err.strerror}") from None
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


# -- artifacts ----------------------------------------------------------------------------------

def _run_to_json(run: Run) -> dict[str, object]:
    return {"observation": dataclasses.asdict(run.observation), "transcripts": run.transcripts,
            "views": run.views, "started": run.started, "leaks": run.leaks}


def _run_from_json(data: dict[str, object]) -> Run:
    obs = dict(data["observation"])  # type: ignore[call-overload]
    obs["names"] = tuple(diagnosis.NameCheck(**{**n, "answers": tuple(n["answers"]),
                                                "upstreams": tuple(n["upstreams"])}) for n in obs["names"])
    obs["tcp"] = tuple(diagnosis.TcpCheck(**t) for t in obs["tcp"])
    return Run(diagnosis.Observation(**obs), list(data["transcripts"]),  # type: ignore[call-overload]
               list(data["views"]), str(data["started"]),  # type: ignore[call-overload]
               list(data.get("leaks", [])))  # type: ignore[call-overload]


def _to_json(runs: list[Run], verdict: diagnosis.Verdict) -> dict[str, object]:
    return {"verdict": {**dataclasses.asdict(verdict), "exit_code": verdict.exit_code},
            "phases": [_run_to_json(r) for r in runs],
            "written": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def _summary(verdict: diagnosis.Verdict) -> str:
    lines = [f"verdict: {verdict.title} [{verdict.code}, exit {verdict.exit_code}]", f"  {verdict.reason}"]
    lines += [f"  - {hint}" for hint in verdict.hints]
    return "\n".join(lines)


def render_markdown(runs: list[Run], verdict: diagnosis.Verdict) -> str:
    out = ["# splitdns verify", "", f"**Verdict: {verdict.title}** (`{verdict.code}`, exit "
           f"{verdict.exit_code})", "", verdict.reason, ""]
    out += [f"- {hint}" for hint in verdict.hints]
    for run in runs:
        obs = run.observation
        out += ["", f"## {obs.phase} ({run.started})", "", "### The pod's resolv.conf", "", "```",
                obs.resolv_conf.rstrip(), "```", "", "### Who owns each name (the resolver's view)", ""]
        out += [f"- {v}" for v in run.views]
        if run.leaks:
            out += ["", "### Where the tunnel zones' queries leave (as `splitdns verify leaks`)", "",
                    "```", *run.leaks, "```"]
        if obs.tcp:
            out += ["", "### TCP paths", ""]
            out += [f"- {t.target} -> {t.address or '?'}: {t.outcome}" for t in obs.tcp]
        out += ["", "### Queries (dig-style)", ""]
        for text in run.transcripts:
            out += ["```", text.rstrip(), "```", ""]
    return "\n".join(out) + "\n"


def _write(out: str | None, markdown: str, data: dict[str, object]) -> list[Path]:
    if out is None:
        return []
    base = Path(out)
    if base.is_dir() or out.endswith("/"):
        base.mkdir(parents=True, exist_ok=True)
        base = base / f"splitdns-verify-{time.strftime('%Y%m%d-%H%M%S')}"
    base.parent.mkdir(parents=True, exist_ok=True)
    md, js = base.with_suffix(".md"), base.with_suffix(".json")
    md.write_text(markdown, encoding="utf-8")
    js.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return [md, js]
