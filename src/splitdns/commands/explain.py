"""`splitdns explain NAME -conf FILE`: which block answers a name, which `forward` and upstreams, and
why, with the label-boundary rule spelled out; also for names no block owns.

Routing goes through the resolver's own `Router` and `Zone.forward_for`, so the explanation cannot
drift from what `serve` does.
Tests: tests/test_explain.py.
"""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import Callable

import dns.exception
import dns.name
import dns.rcode
import dns.rdatatype
import dns.reversename

from splitdns import config
from splitdns.codec import entries
from splitdns.codec.wire import is_subdomain, name_to_wire, question_query, wire_to_text
from splitdns.core.local import Rewritten
from splitdns.core.routing import Router
from splitdns.core.zone import Zone
from splitdns.errors import ConfigError, Location
from splitdns.kube.shared import lenient_corefile, sources
from splitdns.shell import hostsfiles

EXIT_OK, EXIT_CONFIG = 0, 2
DEFAULT_CONF = "Corefile"


def explain(name: str, path: str, port: int = config.DEFAULT_PORT) -> list[str]:
    """The explanation as lines; raises ConfigError when the Corefile cannot be read or parsed."""
    lines = []
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        address = None
    if address is not None:
        name = dns.reversename.from_address(str(address)).to_text()
        lines.append(f"{address} is an address: its name is the reverse name {name} (what PTR asks)")
    try:
        qname = dns.name.from_text(name.lower()).to_text()
    except dns.exception.DNSException as err:
        raise ConfigError(None, f"{name!r} is not a domain name ({err})") from None
    src = _corefile(path)
    text = src.text

    def loc(where: Location | None) -> str:  # a line of the file given, also inside a ConfigMap
        return f"{path}:{src.line(where)}"

    model = lenient_corefile.read(text, path, port)
    if model.error is not None:
        raise ConfigError(None, f"{loc(model.error.where)}: {model.error.message}")
    blocks = [b for b in model.blocks if b.port == port and b.zones]
    zones = {id(z): (b, z) for b in blocks for z in [Zone(b.to_config_block())]}
    by_zone = {zone: b for b in blocks for zone in b.zones}
    wire = name_to_wire(qname)
    owner = Router(z for _, z in zones.values()).route(wire)
    labels = qname.rstrip(".").split(".")
    tried = [".".join(labels[i:]) + "." for i in range(len(labels))] + ["."] if qname != "." else ["."]
    if owner is None:
        lines.append(f"{qname} -> no block on port {port} owns it: the answer is REFUSED")
    else:
        block, _ = zones[id(owner)]
        lines.append(f"{qname} -> block {block.name} ({loc(block.where)})")
    lines.append("  zones tried, longest first; a zone owns a name only if it is the name's last "
                 "whole labels:")
    for candidate in tried:
        b = by_zone.get(candidate)
        mark = ""
        if owner is not None and b is not None and b is zones[id(owner)][0]:
            mark = "   <- owns it"
        where = f"block {b.name} ({loc(b.where)})" if b is not None else "no block"
        lines.append(f"    {candidate:<40} {where}{mark}")
    if owner is None and "." not in by_zone:
        lines.append("  there is no catch-all `.` block, so a name no zone owns is REFUSED; "
                     "add `.:53 { forward . CLUSTER_DNS_IP }`")
    loaded: config.Config | None = None
    refused = ""
    try:
        loaded = config.loads(text, path, port, read_files=False)
    except ConfigError as err:
        where = f"{loc(err.where)}: " if err.where is not None else ""
        refused = f"  note: `splitdns serve` would refuse this Corefile as it is: {where}{err.message}"
    if owner is not None:
        block = zones[id(owner)][0]
        # The block as `serve` builds it (rewrite, template, hosts), when serve would load the file.
        full = next((Zone(b) for b in loaded.blocks if (b.zones, b.port) == (block.zones, block.port)),
                    None) if loaded is not None else None
        lines += _made_here(full, wire) or _inside(block, owner, wire, loc, full)
    lines += _lookalikes(qname, [z for b in blocks for z in b.zones])
    if refused and src.context != sources.CLUSTER:  # the cluster's CoreDNS is not ours to serve
        lines.append(refused)
    return lines


def _made_here(zone: Zone | None, wire: bytes) -> list[str]:
    """A name the block answers itself, by `k8s_schema` (the leak guard needs the pod's search
    list, which is the pod's resolv.conf, not this machine's)."""
    if zone is None or zone.guard is None or zone.guard.decide(question_query(wire, 1), count=False) is None:
        return []
    return ["  answered here: NXDOMAIN with the zone's SOA, a name the Kubernetes DNS schema rules out "
            "(k8s_schema); never sent upstream"]


def _corefile(path: str) -> sources.CorefileSource:
    """The Corefile at `path`, or the one in the ConfigMap YAML at `path` (as `check` reads it)."""
    try:
        return sources.corefile_at(path)
    except FileNotFoundError:
        if path == DEFAULT_CONF:
            raise ConfigError(None, "no ./Corefile here: pass the Corefile to explain with -conf FILE "
                                    "(a Corefile, or the ConfigMap YAML that holds one)") from None
        raise ConfigError(None, f"cannot read {path}: No such file or directory") from None


def _inside(block: lenient_corefile.Block, zone: Zone, wire: bytes,
            loc: Callable[[Location | None], str], full: Zone | None = None) -> list[str]:
    st, kind = block.tunnel_statement, block.tunnel_kind
    if st is not None and kind is not None:
        return [f"  upstreams: {kind.learned}, learned at run time ({st.name}, {loc(st.where)})"]
    answered = _kubernetes(block, wire, loc)
    if answered is not None:
        return answered
    out, asked = _local(full, wire) if full is not None else ([], wire)
    if asked is None:
        return out
    fwd = zone.forward_for(asked)
    if fwd is None:
        if not block.forwards:
            return ["  the block has no `forward`: the answer is SERVFAIL (no next plugin)"]
        return ["  no `forward` of the block covers the name (FROM or `except`): the answer is SERVFAIL"]
    spec = fwd.spec
    st = next(f.statement for f in block.forwards if f.spec is spec)
    ups = [str(u) for u in spec.upstreams] + [f"{f} (resolv.conf, read at start)" for f in spec.files]
    out += [f"  forward {spec.origin} ({loc(st.where)}): the first `forward` of the block whose FROM "
           "covers the name",
           f"  upstreams: {', '.join(ups)}; policy {spec.policy}"]
    if len(block.forwards) > 1:
        out.append("  several `forward` lines in one block are tried in file order; the first that covers "
                   "the name wins")
    return out


def _kubernetes(block: lenient_corefile.Block, wire: bytes,
                loc: Callable[[Location | None], str]) -> list[str] | None:
    """CoreDNS's `kubernetes ZONES...` (the cluster's own Corefile): it answers its zones' names
    before `forward` sees them, from the cluster's Services and Pods; None when it takes no part."""
    st = block.directive("kubernetes")
    if st is None:
        return None
    zones = [z for z in st.args if not z.startswith("{")] or list(block.zones)
    owned = next((z for z in zones if _under(wire, z)), None)
    if owned is None:
        return None
    line = (f"  kubernetes ({loc(st.where)}): CoreDNS's kubernetes plugin answers names of "
            f"{owned.rstrip('.')}. from the cluster's Services and Pods, before any `forward` "
            "(splitdns has no such plugin: this is the cluster's CoreDNS)")
    falls = next((o for o in st.body or () if o.name == "fallthrough"), None)
    if falls is not None and (not falls.args or any(_under(wire, z) for z in falls.args)):
        return [line, "  a name it does not know falls through (`fallthrough`) to the plugins after it, "
                      "`forward` among them"]
    return [line, "  a name it does not know gets NXDOMAIN from it (no `fallthrough` for this zone)"]


def _under(wire: bytes, zone: str) -> bool:
    try:
        return is_subdomain(wire, name_to_wire(zone.rstrip(".") + "."))
    except ValueError:
        return False


def _local(zone: Zone, wire: bytes) -> tuple[list[str], bytes | None]:
    """What `rewrite`, `template` and `hosts` do with an A query for the name, in their order:
    lines, and the name `forward` then sees (None: the block answers it itself)."""
    local = zone.local
    if local is None:
        return [], wire
    hostsfiles.refresh(zone)
    made = local.decide(question_query(wire, dns.rdatatype.A))
    steps = ", ".join(local.steps)
    if made is None:
        return [f"  {steps} (in CoreDNS's plugin order) pass an A query for it on"], wire
    if isinstance(made, Rewritten):
        return [f"  {steps} (in CoreDNS's plugin order): rewrite asks for "
                f"{wire_to_text(made.query.name)} instead, and the reply comes back under the "
                "name asked"], made.query.name
    rcode = dns.rcode.to_text(dns.rcode.Rcode.make(entries.reply(made)[3] & 0xF))
    return [f"  {steps} (in CoreDNS's plugin order): an A query for it is answered by the block "
            f"itself ({rcode}), not forwarded"], None


def _lookalikes(qname: str, zones: list[str]) -> list[str]:
    """Zones a reader might think own the name, and why they do not."""
    out = []
    for zone in zones:
        if zone == "." or qname.endswith("." + zone) or qname == zone:
            continue
        bare = zone.rstrip(".")
        if qname.rstrip(".").endswith(bare):
            out.append(f"  note: {zone} does not own {qname}: the name ends with the text {bare} but not "
                       f"on a label boundary ({qname.rstrip('.')[:-len(bare)]!r} is part of a label)")
        elif f".{bare}." in f".{qname}":
            rest = qname.split(bare, 1)[1].strip(".")
            out.append(f"  note: {zone} does not own {qname}: {bare} appears in the name but is followed by "
                       f".{rest}, so the name belongs to {rest}., not to {zone}")
    return out


def run(name: str, path: str, port: int = config.DEFAULT_PORT) -> int:
    try:
        lines = explain(name, path, port)
    except ConfigError as err:
        print(f"splitdns explain: {err}", file=sys.stderr)
        return EXIT_CONFIG
    print("\n".join(lines))
    return EXIT_OK
