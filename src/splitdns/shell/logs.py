"""Log lines in CoreDNS's formats (so existing log parsers keep working), or one JSON object.

`log`:    [INFO] {remote}:{port} - {id} "{type} {class} {name} {proto} {size} {do} {bufsize}"
          {rcode} {rflags} {rsize} {duration}
`errors`: [ERROR] plugin/errors: {rcode-number} {name} {type}: {error}

`log NAMES FORMAT` fills a template of CoreDNS's placeholders instead (`templated_line`), and
ours: `{upstream}` (which upstream answered, "host:port", as CoreDNS's `{/forward/upstream}`
metadata, which is filled too) and `{upstream_duration}` (how long the exchange took until it
answered); `-` for an answer no upstream gave (a cache hit, a SERVFAIL of our own). `format json`
carries them as `upstream` and `upstream_duration` (null then). `errors` lines end with the zone.
Tests: tests/test_query_log.py, tests/test_error_log.py.
"""

from __future__ import annotations

import json
import re
import struct
import sys
from typing import TextIO

import dns.rcode
import dns.rdatatype

from splitdns.addresses import host_port
from splitdns.codec import wire

_FLAG_NAMES = ((wire.QR, "qr"), (wire.AA, "aa"), (wire.TC, "tc"), (wire.RD, "rd"),
               (wire.RA, "ra"), (wire.AD, "ad"), (wire.CD, "cd"))


def _flags(reply: bytes) -> str:
    flags = struct.unpack_from("!H", reply, 2)[0] if len(reply) >= 4 else 0
    return ",".join(name for bit, name in _FLAG_NAMES if flags & bit)


Via = tuple[str, float]  # which upstream answered, and how long its exchange took


def query_line(q: wire.Query, remote: tuple[str, int] | tuple[str, int, int, int], proto: str, size: int,
               reply: bytes, seconds: float, as_json: bool, via: Via | None = None) -> str:
    qtype = dns.rdatatype.to_text(dns.rdatatype.RdataType.make(q.qtype))
    name = wire.wire_to_text(q.question[:-4])
    rcode = dns.rcode.to_text(dns.rcode.Rcode(reply[3] & 0xF)) if len(reply) >= 4 else "-"
    if as_json:
        return json.dumps({
            "level": "info", "remote": remote[0], "port": remote[1], "id": q.id, "type": qtype,
            "class": "IN", "name": name, "proto": proto, "size": size, "do": q.do,
            "bufsize": q.payload, "rcode": rcode, "rflags": _flags(reply), "rsize": len(reply),
            "duration": round(seconds, 6), "upstream": via[0] if via else None,
            "upstream_duration": round(via[1], 6) if via else None,
        })
    return (f'[INFO] {host_port(remote[0], remote[1])} - {q.id} "{qtype} IN {name} {proto} {size} '
            f'{str(q.do).lower()} {q.payload}" {rcode} {_flags(reply)} {len(reply)} '
            f"{seconds:.9f}s")


COMMON = ('{remote}:{port} - {>id} "{type} {class} {name} {proto} {size} {>do} {>bufsize}" '
          '{rcode} {>rflags} {rsize} {duration}')
COMBINED = COMMON + ' "{>opcode}"'
_PLACEHOLDER = re.compile(r"\{(>?[a-z_]+|/[^{}]*)\}")


def templated_line(q: wire.Query, remote: tuple[str, int] | tuple[str, int, int, int], proto: str,
                   size: int, reply: bytes, seconds: float, template: str, via: Via | None = None) -> str:
    """A `log . FORMAT` line: CoreDNS's placeholders replaced, unknown ones kept as written,
    metadata labels (`{/label}`) as `-` but `{/forward/upstream}`, the one `forward` sets."""
    host = f"[{remote[0]}]" if ":" in remote[0] else remote[0]
    rcode = dns.rcode.to_text(dns.rcode.Rcode(reply[3] & 0xF)) if len(reply) >= 4 else "-"
    values = {
        "type": dns.rdatatype.to_text(dns.rdatatype.RdataType.make(q.qtype)), "class": "IN",
        "name": wire.wire_to_text(q.question[:-4]), "proto": proto, "remote": host, "local": "-",
        "size": str(size), "port": str(remote[1]), "duration": f"{seconds:.9f}s", "rcode": rcode,
        "rsize": str(len(reply)), ">rflags": _flags(reply), ">bufsize": str(q.payload),
        ">do": str(q.do).lower(), ">id": str(q.id), ">opcode": str((q.flags >> 11) & 0xF),
        "upstream": via[0] if via else "-", "/forward/upstream": via[0] if via else "-",
        "upstream_duration": f"{via[1]:.9f}s" if via else "-",
    }
    text = template.replace("{common}", COMMON).replace("{combined}", COMBINED)

    def fill(match: re.Match[str]) -> str:
        key = match.group(1)
        return values.get(key, "-" if key.startswith("/") else match.group(0))

    return "[INFO] " + _PLACEHOLDER.sub(fill, text)


def error_line(rcode: int, name: str, qtype: str, error: str, as_json: bool, zone: str = "") -> str:
    """CoreDNS's line, and the zone (the block) whose answer it was, last so CoreDNS's parsers
    still read the line."""
    if as_json:
        return json.dumps({"level": "error", "plugin": "errors", "rcode": rcode,
                           "name": name, "type": qtype, "error": error, "zone": zone})
    return f"[ERROR] plugin/errors: {rcode} {name} {qtype}: {error}" + (f" (zone {zone})" if zone else "")


def info(message: str, out: TextIO | None = None) -> None:
    print(f"[INFO] {message}", file=out or sys.stderr, flush=True)


def warning(message: str, out: TextIO | None = None) -> None:
    print(f"[WARNING] {message}", file=out or sys.stderr, flush=True)


def error(message: str, out: TextIO | None = None) -> None:
    print(f"[ERROR] {message}", file=out or sys.stderr, flush=True)


def emit(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
