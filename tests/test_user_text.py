"""The repr scanner that tests/conftest.py runs over every text the suite shows a user."""

from __future__ import annotations

import pytest

from tests.support import user_text

REPRS = [
    # what a dead upstream's EDE and errors line said before it was fixed
    "(UpstreamState(upstream=Upstream(host='127.0.0.1', port=5398, origin='127.0.0.1:5398'), fails=2, "
    "probing=True, label='127.0.0.1:5398'): connection refused (nothing listens there))",
    "internal error while resolving: KeyError('x')",
    "cannot read: OSError(98, 'Address already in use')",
    "state: <splitdns.core.tunnel.TunnelState object at 0x7f3a2b1c0d90>",
    "got TimeoutError()",
    # containers in an f-string
    "policy: unknown policy 'fastest'; use one of ('random', 'round_robin', 'sequential')",
    "kubectl exec: Command '['kubectl', 'exec', 'deploy/app']' timed out after 120 seconds",
    "20000 hostile packets: {'quiet': 11236, 'noisy': 8764}",
]
PROSE = [
    "127.0.0.1:5398: connection refused (nothing listens there)",
    "; EDE: 22 (No Reachable Authority): (127.0.0.23:9: connection refused (nothing listens there))",
    "Corefile:3: SD100 error forward: the upstream (127.0.0.1) is this server",
    "the tunnel is down (RECONNECTING: ping-restart)",
    "[ERROR] plugin/errors: 2 example.org. A: 127.0.0.1:53: timeout",
    "splitdns check: did you mean `errors`?",
    "policy: unknown policy 'fastest'; use one of random, round_robin, sequential",
    "forward: 'nowhere' is neither an IP address (IP, IP:PORT, [IPv6]:PORT) nor a file path",
    'args: ["-conf", "/etc/coredns/Corefile"]',
    "missing '}': the block opened on this line is not closed",
    "'{$UPSTREAM}' (the pod's value) and '(snippet)'",
]


@pytest.mark.parametrize("line", REPRS)
def test_a_repr_is_found(line: str) -> None:
    assert user_text.reprs([("test", line)])


@pytest.mark.parametrize("line", PROSE)
def test_prose_is_not_taken_for_a_repr(line: str) -> None:
    assert not user_text.reprs([("test", line)])
