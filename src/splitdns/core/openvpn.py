"""What the VPN server pushed, and whether the tunnel is up: parsed from OpenVPN's words. Pure.

Two sources speak the same language: the environment OpenVPN gives its `--up`/`--down`
scripts, and the `>UPDOWN:ENV,name=value` lines of its management interface with
`--management-up-down`. Names (OpenVPN 2.6, checked on 2.6.14):

- `foreign_option_N` = `dhcp-option DNS 192.0.2.1` | `DNS6 2001:db8::1` | `DOMAIN d` |
  `DOMAIN-SEARCH d` | `DOMAIN-ROUTE d` | `ADAPTER_DOMAIN_SUFFIX d` (no port: lost in the copy)
- `dns_server_{n}_address_{m}`, `dns_server_{n}_port_{m}`, `dns_server_{n}_resolve_domain_{m}`,
  `dns_search_domain_{n}`; 2.6.0 and 2.6.1 spelled `dns_server_{n}_address4` / `_port4` /
  `_address6` / `_port6`. `n` is the position after sorting by server id, 1-based.

When `dns_server_*` variables exist they win (they carry ports and split domains); only
OpenVPN's lowest server (n=1) is applied, as its man page says. Otherwise the
`foreign_option_*` DNS entries are used, in numeric order.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from splitdns.core import tunnel
from splitdns.core.tunnel import DOWN, UP, Pushed, TunnelState

_FOREIGN = re.compile(r"foreign_option_(\d+)$")
_ADDRESS = re.compile(r"dns_server_(\d+)_address_(\d+)$")
_ADDRESS_OLD = re.compile(r"dns_server_(\d+)_address([46])$")
_RESOLVE = re.compile(r"dns_server_(\d+)_resolve_domain_(\d+)$")
_SEARCH = re.compile(r"dns_search_domain_(\d+)$")


def from_env(env: Mapping[str, str]) -> Pushed:
    """The pushed DNS settings in an OpenVPN script environment or management ENV block."""
    modern = _modern(env)
    return modern if modern.servers else _legacy(env, modern)


def _modern(env: Mapping[str, str]) -> Pushed:
    addresses: dict[int, dict[int, tuple[str, int]]] = {}
    resolve: dict[int, dict[int, str]] = {}
    for name, value in env.items():
        if m := _ADDRESS.match(name):
            n, i = int(m.group(1)), int(m.group(2))
            port = _port(env.get(f"dns_server_{n}_port_{i}"))
            _add(addresses, n, i, value, port)
        elif m := _ADDRESS_OLD.match(name):
            n, family = int(m.group(1)), m.group(2)
            _add(addresses, n, int(family), value, _port(env.get(f"dns_server_{n}_port{family}")))
        elif m := _RESOLVE.match(name):
            resolve.setdefault(int(m.group(1)), {})[int(m.group(2))] = tunnel.domain(value)
    search = _numbered(env, _SEARCH)
    if not addresses:
        return Pushed(search=search)
    first = min(addresses)
    servers = tuple(addresses[first][i] for i in sorted(addresses[first]))
    domains = tuple(d for i, d in sorted(resolve.get(first, {}).items()) if d)
    return Pushed(servers=servers, domains=domains, search=search)


def _add(table: dict[int, dict[int, tuple[str, int]]], n: int, i: int, value: str, port: int) -> None:
    address = tunnel.address(value)
    if address is not None:
        table.setdefault(n, {})[i] = (address, port)


def _legacy(env: Mapping[str, str], modern: Pushed) -> Pushed:
    servers: list[tuple[str, int]] = []
    domains: list[str] = []
    search: list[str] = list(modern.search)
    for _, value in sorted((int(m.group(1)), v) for k, v in env.items() if (m := _FOREIGN.match(k))):
        words = value.split()
        if len(words) != 3 or words[0] != "dhcp-option":
            continue
        kind, arg = words[1].upper(), words[2]
        if kind in ("DNS", "DNS6"):
            address = tunnel.address(arg)
            if address is not None and (address, 53) not in servers:
                servers.append((address, 53))
        elif kind in ("DOMAIN", "ADAPTER_DOMAIN_SUFFIX", "DOMAIN-ROUTE"):
            domains.append(tunnel.domain(arg))
        elif kind == "DOMAIN-SEARCH":
            search.append(tunnel.domain(arg))
    return Pushed(tuple(servers), tuple(dict.fromkeys(d for d in domains if d)),
                  tuple(dict.fromkeys(s for s in search if s)))


def _numbered(env: Mapping[str, str], pattern: re.Pattern[str]) -> tuple[str, ...]:
    found = sorted((int(m.group(1)), tunnel.domain(v)) for k, v in env.items() if (m := pattern.match(k)))
    return tuple(d for _, d in found if d)


def _port(text: str | None) -> int:
    return int(text) if text and text.isdigit() and 0 < int(text) < 65536 else 53


# -- the management interface's state notices ---------------------------------------------------

def state_from_line(fields: list[str], pushed: Pushed) -> TunnelState | None:
    """A `>STATE:` (or `state all` history) line's fields: time, name, reason, addresses..."""
    if len(fields) < 2:
        return None
    name, reason = fields[1], fields[2] if len(fields) > 2 else ""
    if name == "CONNECTED":
        return TunnelState(UP, "connected", pushed)
    if name in ("RECONNECTING", "EXITING", "WAIT", "AUTH", "CONNECTING", "RESOLVE", "TCP_CONNECT",
                "GET_CONFIG", "AUTH_PENDING"):
        return TunnelState(DOWN, f"{name}: {reason}" if reason else name, pushed)
    return None  # ASSIGN_IP, ADD_ROUTES: on the way up; the UPDOWN block or CONNECTED follows


def from_push_reply(message: str) -> Pushed | None:
    """The DNS options of a `PUSH_REPLY,...` control message, as the client logs it at verb 3.

    This is how we learn the pushed servers when we attach to the management interface after
    the tunnel came up (the UPDOWN block is only sent at the moment it comes up).
    """
    start = message.find("PUSH_REPLY,")
    if start < 0:
        return None
    body = message[start + len("PUSH_REPLY,"):].rstrip("'\" ")
    env: dict[str, str] = {}
    foreign = 0
    servers: dict[int, list[str]] = {}
    resolve: dict[int, list[str]] = {}
    search: list[str] = []
    for option in body.split(","):
        words = option.split()
        if len(words) == 3 and words[0] == "dhcp-option":
            foreign += 1
            env[f"foreign_option_{foreign}"] = option.strip()
        elif len(words) >= 5 and words[:2] == ["dns", "server"] and words[2].lstrip("-").isdigit():
            if words[3] == "address":
                servers.setdefault(int(words[2]), []).extend(words[4:])
            elif words[3] == "resolve-domains":
                resolve.setdefault(int(words[2]), []).extend(words[4:])
        elif len(words) >= 3 and words[:2] == ["dns", "search-domains"]:
            search.extend(words[2:])
    for rank, server_id in enumerate(sorted(servers), start=1):
        for m, address in enumerate(servers[server_id], start=1):
            host, port = _split_host_port(address)
            env[f"dns_server_{rank}_address_{m}"] = host
            if port:
                env[f"dns_server_{rank}_port_{m}"] = port
        for m, domain in enumerate(resolve.get(server_id, []), start=1):
            env[f"dns_server_{rank}_resolve_domain_{m}"] = domain
    for n, domain in enumerate(search, start=1):
        env[f"dns_search_domain_{n}"] = domain
    return from_env(env)


def _split_host_port(text: str) -> tuple[str, str]:
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, rest.lstrip(":")
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        return host, port
    return text, ""


def to_json(state: TunnelState) -> dict[str, object]:
    return {"status": state.status, "reason": state.reason,
            "servers": [list(s) for s in state.pushed.servers],
            "domains": list(state.pushed.domains), "search": list(state.pushed.search),
            "device": state.device}


def from_json(data: object) -> TunnelState:
    """The state file `splitdns openvpn-hook` writes; anything malformed reads as down."""
    if not isinstance(data, dict) or data.get("status") not in (UP, DOWN):
        return TunnelState(DOWN, "the state file is not one splitdns openvpn-hook wrote")
    servers = tuple((str(ip), int(port)) for ip, port in data.get("servers", [])
                    if tunnel.address(str(ip)) is not None and isinstance(port, int))
    domains, search = data.get("domains", []), data.get("search", [])
    pushed = Pushed(servers, tuple(map(str, domains)), tuple(map(str, search)))
    device = data.get("device")
    return TunnelState(str(data["status"]), str(data.get("reason", "")), pushed,
                       device if isinstance(device, str) else "")
