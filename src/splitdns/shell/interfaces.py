"""Which network interface holds an address: asked of the kernel with no privilege (SIOCGIFADDR
on each interface of our network namespace), for a tunnel whose watcher knows its address but
not its name (OpenVPN's CONNECTED line gives the tunnel's local address)."""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import socket
import struct

SIOCGIFADDR = 0x8915


def holding(address: str) -> str | None:
    """The interface whose IPv4 address is `address`, or None (IPv6, or no such interface)."""
    try:
        wanted = ipaddress.ip_address(address)
    except ValueError:
        return None
    if wanted.version != 4:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            with contextlib.suppress(OSError):  # no IPv4 address, or gone meanwhile
                raw = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
                if socket.inet_ntoa(raw[20:24]) == str(wanted):
                    return name
    return None
