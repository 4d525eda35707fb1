"""A pod namespace for the search walk: real C libraries resolving through splitdns.

One network namespace (`<prefix>-walk`, recorded as every lab's is, so a crashed run is
cleaned by the next) holds the pod's loopback: splitdns on 127.0.0.1:53, run with the
Corefile `splitdns render` writes, and three scripted upstreams that log every query they
get: kube-dns (127.0.0.21), the catch-all (127.0.0.22) and the tunnel's DNS (127.0.0.23, the
tunnel's state from `splitdns openvpn-hook`). The pod's /etc/resolv.conf is the file the
kubelet writes from render's dnsConfig (`ip netns exec` bind-mounts /etc/netns/NS/resolv.conf).
Clients: glibc's `getent ahosts`, Python's getaddrinfo (glibc too) and a musl getaddrinfo
client built here with musl-gcc. Used by tests/test_search_walk_lab.py and bench/search_walk.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from splitdns.commands import render

from . import state
from .netns import LabError, kill_ns_processes, ns_run, run

ROOT = Path(__file__).resolve().parents[2]
KUBE_DNS, CATCH_ALL, TUNNEL_DNS = "127.0.0.21", "127.0.0.22", "127.0.0.23"
TUNNEL_ZONE = "svc.acme.internal"
UPSTREAMS = {"kube-dns": KUBE_DNS, "catch-all": CATCH_ALL, "tunnel": TUNNEL_DNS}
CLIENTS = ("getent", "python", "musl")
PY_LOOKUP = ("import socket, sys\ntry:\n    for a in sorted({i[4][0] for i in socket.getaddrinfo("
             "sys.argv[1], None, type=socket.SOCK_STREAM)}):\n        print(a)\nexcept socket.gaierror as e:"
             "\n    print('error:', e.strerror)\n    sys.exit(2)\n")


def rendered(autopath: bool) -> tuple[str, str]:
    """The Corefile and the pod's resolv.conf, as `splitdns render` writes them for this pod (the
    tunnel zone's state from the hook's file here: no OpenVPN runs in this lab)."""
    req = render.Request(zones=[f"{TUNNEL_ZONE}=openvpn", f".={CATCH_ALL}"], cluster_dns=KUBE_DNS,
                         filter_aaaa=True, no_autopath=not autopath)
    docs = [d for text in render.files(req).values() for d in yaml.safe_load_all(text) if d]
    corefile = next(d["data"]["Corefile"] for d in docs if d["kind"] == "ConfigMap")
    pod = next(d["spec"]["template"]["spec"] for d in docs if d["kind"] == "Deployment")
    conf = pod["dnsConfig"]
    options = " ".join(o["name"] + (f":{o['value']}" if "value" in o else "") for o in conf["options"])
    servers = "".join(f"nameserver {n}\n" for n in conf["nameservers"])
    # What the kubelet writes for dnsPolicy None.
    resolv = f"search {' '.join(conf['searches'])}\n{servers}options {options}\n"
    return corefile, resolv


def rules(names: dict[str, str], delay_ms: float = 0) -> list[dict[str, Any]]:
    """A stand-in that has these names (name -> IPv4 address; each has an IPv6 one too) and
    denies every other with its zone's SOA, each reply after `delay_ms`."""
    out: list[dict[str, Any]] = []
    for name, address in names.items():
        v6 = "2001:db8::" + address.rsplit(".", 1)[1]
        out += [{"qname": name, "qtype": "A", "records": [f"{name} 60 IN A {address}"]},
                {"qname": name, "qtype": "AAAA", "records": [f"{name} 60 IN AAAA {v6}"]},
                {"qname": name, "authority": [f"{name} 60 IN SOA ns.{name} h.{name} 1 2 3 4 60"]}]
    out.append({"suffix": ".", "rcode": "NXDOMAIN",
                "authority": [". 60 IN SOA a.root-servers.net. nstld.verisign-grs.com. 1 2 3 4 60"]})
    if delay_ms:
        for rule in out:
            rule["delay_ms"] = delay_ms
    return out


@dataclass
class WalkLab:
    """The running pod: `lookup` a name with a client, `asked` what the stand-ins saw."""

    workdir: Path
    ns: str
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: dict[str, Path] = field(default_factory=dict)
    musl: Path | None = None

    def lookup(self, client: str, name: str) -> tuple[int, list[str]]:
        """Exit code and output lines of one client's getaddrinfo(name) inside the pod."""
        argv = {"getent": ["getent", "ahosts", name], "python": [sys.executable, "-c", PY_LOOKUP, name],
                "musl": [str(self.musl), name]}[client]
        proc = subprocess.run(["ip", "netns", "exec", self.ns, *argv], capture_output=True, text=True,
                              timeout=30, stdin=subprocess.DEVNULL)
        lines = proc.stdout.split("\n")
        if client == "getent":  # "ADDR STREAM name", once per socket type
            lines = sorted({line.split()[0] for line in lines if line.strip()})
        return proc.returncode, sorted(line for line in lines if line)

    def client_queries(self) -> int:
        """The queries splitdns was sent so far (its /metrics, on the pod's loopback)."""
        script = ("import urllib.request\nt = urllib.request.urlopen('http://127.0.0.1:9153/metrics', "
                  "timeout=5).read().decode()\nprint(sum(float(x.rsplit(' ', 1)[1]) for x in t.splitlines() "
                  "if x.startswith('coredns_dns_requests_total{')))")
        return int(float(ns_run(self.ns, [sys.executable, "-c", script], timeout=15).strip()))

    def asked(self) -> dict[str, list[str]]:
        """Every query name (and type) each stand-in got so far, oldest first."""
        out: dict[str, list[str]] = {}
        for role, path in self.logs.items():
            text = path.read_text(encoding="utf-8") if path.exists() else ""
            entries = [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines() if line]
            out[role] = [f"{e['qname'].lower()} {e['qtype']}" for e in entries if "qname" in e]
        return out

    def tunnel(self, up: bool, settle: bool = True) -> None:
        """What OpenVPN's --up/--down would make `splitdns openvpn-hook` write; with `settle`,
        then wait until the resolver's /ready?zone= says the tunnel zone is up or down (it reads
        the state file every 200 ms: a lookup sent before that would race it)."""
        # `dev`: the interface OpenVPN names, to which the zone binds its upstream sockets: the
        # stand-in tunnel DNS listens on this namespace's loopback.
        env = {"script_type": "up" if up else "down", "dns_server_1_address_1": TUNNEL_DNS, "dev": "lo",
               "PYTHONPATH": str(ROOT / "src")}
        subprocess.run([sys.executable, "-m", "splitdns", "openvpn-hook", "--state",
                        str(self.workdir / "openvpn.json"), "tun0", "1500", "0", "10.8.0.2",
                        "255.255.255.0", "init"], env=env, check=True, timeout=10)
        if settle:
            _wait(f"the tunnel zone {'up' if up else 'down'}", self,
                  [sys.executable, "-c", _READY_STATUS, f"http://127.0.0.1:8181/ready?zone={TUNNEL_ZONE}"],
                  seen="200" if up else "503", seconds=10)


# The HTTP status of a GET (an error's too), or "none" while nothing answers.
_READY_STATUS = ("import sys, urllib.error, urllib.request\n"
                 "try:\n    print(urllib.request.urlopen(sys.argv[1], timeout=1).status)\n"
                 "except urllib.error.HTTPError as err:\n    print(err.code)\n"
                 "except OSError:\n    print('none')\n")


def _start(lab: WalkLab, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
    with (lab.workdir / f"{name}.stderr").open("wb") as err:
        proc = subprocess.Popen(["ip", "netns", "exec", lab.ns, *argv], cwd=ROOT, stdin=subprocess.DEVNULL,
                                stdout=err, stderr=err, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    lab.procs.append(proc)
    return proc


def _wait(what: str, lab: WalkLab, check: list[str], seen: str = "", seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        out = ns_run(lab.ns, check, check=False, timeout=5)
        if out.strip() and seen in out:
            return
        time.sleep(0.1)
    logs = "\n".join(f"{p.name}: {p.read_text(errors='replace')[-2000:]}"
                     for p in lab.workdir.glob("*.stderr"))
    raise LabError(f"{what} did not come up in {seconds:.0f}s\n{logs}")


@contextlib.contextmanager
def walk_lab(workdir: Path, names: dict[str, dict[str, str]], autopath: bool = True,
             ndots: int | None = None, delay_ms: float = 0) -> Iterator[WalkLab]:
    """The pod, its resolver (with or without `autopath` and `k8s_schema`) and the stand-ins,
    which know `names` (role -> name -> address) and answer after `delay_ms`; `ndots` replaces
    the rendered resolv.conf's (CoreDNS's documented workaround, ndots:1). Everything is
    removed on the way out."""
    with state.locked():
        state.cleanup_stale()
        record = state.new_record(manual=False)
    ns = record.prefix + "-walk"
    record.namespaces.append(ns)
    record.etc_netns.append(ns)
    record.save()
    lab = WalkLab(workdir, ns)
    try:
        corefile, resolv = rendered(autopath)
        if ndots is not None:
            resolv = "".join(line if not line.startswith("options") else f"options ndots:{ndots}\n"
                             for line in resolv.splitlines(keepends=True))
        corefile = corefile.replace("management 127.0.0.1:7505", f"state {workdir / 'openvpn.json'}")
        (state.ETC_NETNS / ns).mkdir(parents=True, exist_ok=True)
        (state.ETC_NETNS / ns / "resolv.conf").write_text(resolv)
        (workdir / "Corefile").write_text(corefile)
        run(["ip", "netns", "add", ns])
        run(["ip", "-n", ns, "link", "set", "lo", "up"])
        for role, addr in UPSTREAMS.items():
            script = workdir / f"{role}.json"
            script.write_text(json.dumps(rules(names.get(role, {}), delay_ms)))
            lab.logs[role] = workdir / f"{role}.jsonl"
            _start(lab, role, [sys.executable, "-m", "tests.support.scripted_upstream", "--addr", addr,
                               "--port", "53", "--script", str(script), "--log", str(lab.logs[role]),
                               "--ready-file", str(workdir / f"{role}.ready")])
        lab.tunnel(up=True, settle=False)
        _start(lab, "splitdns", [sys.executable, "-m", "splitdns", "serve", "-conf",
                                 str(workdir / "Corefile")])
        for role in UPSTREAMS:
            _wait(role, lab, ["cat", str(workdir / f"{role}.ready")])
        _wait("splitdns", lab, ["dig", "+time=1", "+tries=1", "@127.0.0.1", "-p", "53", "up.invalid"],
              seen="status:")
        lab.tunnel(up=True)  # and the resolver has read it
        lab.musl = workdir / "lookup-musl"
        source = Path(__file__).parent / "clients" / "lookup.c"
        run(["musl-gcc", "-static", "-O2", "-o", str(lab.musl), str(source)], timeout=60)
        yield lab
    finally:
        for proc in lab.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in lab.procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        kill_ns_processes(ns)
        state.destroy(record)
        shutil.rmtree(state.ETC_NETNS / ns, ignore_errors=True)
