"""Tests of the scripted upstream DNS server, driven with real `dig` and real sockets."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import dns.message
import dns.rrset
import pytest

from tests.support.processes import (
    DigResult,
    Upstream,
    dig,
    free_port,
    scripted_upstream,
)
from tests.support.scripted_upstream import POISON_A, WRONG_QUESTION

# The scripted upstream is a tool of the product's tests: its tests are counted apart.
pytestmark = pytest.mark.tooling

DB = "db.svc.acme.internal."
DB_A = f"{DB} 300 IN A 192.168.240.10"
SOA = "acme.internal. 60 IN SOA ns.acme.internal. hostmaster.acme.internal. 1 3600 600 86400 60"


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[Upstream]:
    """One upstream; each test scripts it with set_rules."""
    with scripted_upstream(tmp_path, [{"qname": DB, "qtype": "A", "records": [DB_A]}]) as up:
        yield up


def ask(up: Upstream, *args: str, timeout: float = 2) -> DigResult:
    return dig(*args, server=up.addr, port=up.port, timeout=timeout)


def udp_exchange(up: Upstream, query: dns.message.Message, replies: int) -> list[tuple[Any, int]]:
    """Send `query` from an unconnected socket, which (unlike dig's) sees every reply."""
    received: list[tuple[Any, int]] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(2)
        sock.sendto(query.to_wire(), (up.addr, up.port))
        for _ in range(replies):
            data, (_, port) = sock.recvfrom(65535)
            received.append((dns.message.from_wire(data), port))
    return received


def tcp_connect(up: Upstream) -> socket.socket:
    return socket.create_connection((up.addr, up.port), timeout=2)


def send_framed(sock: socket.socket, *messages: dns.message.Message) -> None:
    sock.sendall(b"".join(len(w).to_bytes(2, "big") + w for w in (m.to_wire() for m in messages)))


def recv_framed(sock: socket.socket) -> dns.message.Message:
    length = int.from_bytes(recv_exactly(sock, 2), "big")
    return dns.message.from_wire(recv_exactly(sock, length))


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("server closed the connection")
        data += chunk
    return data


# --- answers ---------------------------------------------------------------------------


def test_answer_echoes_question_case_and_flags(upstream: Upstream) -> None:
    result = ask(upstream, "DB.Svc.ACME.internal", "A")

    assert result.status == "NOERROR"
    assert result.question == [("DB.Svc.ACME.internal.", "A")]
    assert result.rdata == ["192.168.240.10"]
    assert {"qr", "rd", "ra"} <= result.flags
    assert "aa" not in result.flags


def test_nxdomain_with_soa_aa_and_ttl_override(upstream: Upstream) -> None:
    upstream.set_rules(
        [{"qname": "gone.acme.internal.", "rcode": "NXDOMAIN", "authority": [SOA], "aa": True,
          "ttl": 7}]
    )  # fmt: skip
    result = ask(upstream, "gone.acme.internal")

    assert result.status == "NXDOMAIN"
    assert result.answers == []
    assert [(name, ttl, rdtype) for name, ttl, rdtype, _ in result.authority] == [
        ("acme.internal.", 7, "SOA")
    ]
    assert "aa" in result.flags


def test_unmatched_name_type_or_label_is_refused(upstream: Upstream) -> None:
    upstream.set_rules([{"suffix": "acme.internal.", "qtype": "A", "records": [DB_A]}])

    assert ask(upstream, "x.y.ACME.internal", "A").status == "NOERROR"
    assert ask(upstream, "acme.internal", "A").status == "NOERROR"
    # Whole-label suffix: "notacme" does not end in the label "acme".
    assert ask(upstream, "notacme.internal", "A").status == "REFUSED"
    assert ask(upstream, "x.acme.internal", "AAAA").status == "REFUSED"


def test_servfail_and_transport_specific_rules(upstream: Upstream) -> None:
    upstream.set_rules(
        [{"qname": DB, "transport": "tcp", "records": [DB_A]}, {"qname": DB, "action": "servfail"}]
    )

    assert ask(upstream, DB).status == "SERVFAIL"
    assert ask(upstream, DB, "+tcp").rdata == ["192.168.240.10"]


# --- truncation ------------------------------------------------------------------------


def test_truncate_gives_tc_over_udp_and_full_answer_over_tcp(upstream: Upstream) -> None:
    upstream.set_rules([{"qname": DB, "action": "truncate", "records": [DB_A]}])

    udp_only = ask(upstream, DB, "+ignore")  # +ignore: show the TC reply, do not retry
    assert "tc" in udp_only.flags
    assert udp_only.answers == []

    assert ask(upstream, DB, "+tcp").rdata == ["192.168.240.10"]

    fallback = ask(upstream, DB)  # dig retries over TCP by itself on TC
    assert fallback.rdata == ["192.168.240.10"]
    assert "tc" not in fallback.flags
    assert [q["transport"] for q in upstream.queries()] == ["udp", "tcp", "udp", "tcp"]


def test_oversized_udp_answer_is_truncated_like_a_real_server(upstream: Upstream) -> None:
    records = [f"big.acme.internal. 300 IN A 10.0.0.{n}" for n in range(1, 41)]
    upstream.set_rules([{"qname": "big.acme.internal.", "records": records}])

    assert "tc" in ask(upstream, "big.acme.internal", "+noedns", "+ignore").flags
    assert len(ask(upstream, "big.acme.internal", "+noedns").answers) == 40


# --- timing ----------------------------------------------------------------------------


def test_delay_is_honoured(upstream: Upstream) -> None:
    upstream.set_rules([{"qname": DB, "records": [DB_A], "delay_ms": 400}])

    result = ask(upstream, DB)

    assert result.rdata == ["192.168.240.10"]
    assert 0.4 <= result.elapsed < 1.5, result.elapsed


def test_delayed_answer_does_not_block_others(upstream: Upstream) -> None:
    upstream.set_rules(
        [
            {"qname": "slow.acme.internal.", "records": [DB_A], "delay_ms": 1000},
            {"qname": DB, "records": [DB_A]},
        ]
    )
    with ThreadPoolExecutor(1) as pool:
        slow = pool.submit(ask, upstream, "slow.acme.internal")
        upstream.wait_for_queries(1)  # the slow query is in
        fast = ask(upstream, DB)
        assert not slow.done()
        assert fast.status == "NOERROR"
        assert fast.elapsed < 0.5, fast.elapsed
        assert slow.result().status == "NOERROR"


def test_tcp_pipelined_replies_come_as_ready(upstream: Upstream) -> None:
    upstream.set_rules(
        [
            {"qname": "slow.acme.internal.", "records": [DB_A], "delay_ms": 300},
            {"qname": DB, "records": [DB_A]},
        ]
    )
    slow = dns.message.make_query("slow.acme.internal.", "A")
    fast = dns.message.make_query(DB, "A")
    with tcp_connect(upstream) as sock:
        send_framed(sock, slow, fast)  # both queries in one segment
        first, second = recv_framed(sock), recv_framed(sock)

    assert (first.id, second.id) == (fast.id, slow.id)
    assert [q["transport"] for q in upstream.queries()] == ["tcp", "tcp"]


def test_drop_times_out(upstream: Upstream) -> None:
    upstream.set_rules([{"qname": DB, "action": "drop"}])

    result = ask(upstream, DB, timeout=1)

    assert result.status == "TIMEOUT"
    assert 0.9 <= result.elapsed < 3, result.elapsed
    assert [q["qname"] for q in upstream.queries()] == [DB]


def test_close_ends_tcp_connection_without_reply(upstream: Upstream) -> None:
    upstream.set_rules([{"qname": DB, "action": "close"}])

    with tcp_connect(upstream) as sock:
        send_framed(sock, dns.message.make_query(DB, "A"))
        assert sock.recv(1) == b""


# --- raw and forged replies ------------------------------------------------------------


def test_raw_bytes_with_patched_id(upstream: Upstream) -> None:
    crafted = dns.message.make_response(dns.message.make_query("raw.acme.internal.", "A"))
    crafted.answer.append(dns.rrset.from_text("raw.acme.internal.", 42, "IN", "A", "10.9.8.7"))
    crafted.id = 0  # patch_id must put the real ID here, or dig would ignore the reply
    rule = {"qname": "raw.acme.internal.", "action": "raw", "hex": crafted.to_wire().hex(),
            "patch_id": True}  # fmt: skip
    upstream.set_rules([rule])

    result = ask(upstream, "raw.acme.internal")

    assert result.answers == [("raw.acme.internal.", 42, "A", "10.9.8.7")]


def test_forged_wrong_id_is_ignored_by_dig(upstream: Upstream) -> None:
    upstream.set_rules(
        [{"qname": DB, "records": [DB_A], "forge": {"wrong_id": 3, "wrong_question": 1}}]
    )

    result = ask(upstream, DB)

    assert result.rdata == ["192.168.240.10"]
    assert "ID mismatch" in result.stdout + result.stderr  # dig did see the forgeries
    assert len(upstream.queries()) == 1


def test_forgeries_arrive_before_the_genuine_reply(upstream: Upstream) -> None:
    upstream.set_rules(
        [
            {
                "qname": DB,
                "records": [DB_A],
                "delay_ms": 100,  # keeps the genuine reply last
                "forge": {"wrong_id": 2, "wrong_question": 1, "wrong_port": 1},
            }
        ]
    )
    query = dns.message.make_query(DB, "A")

    replies = udp_exchange(upstream, query, replies=5)

    *forged, (genuine, genuine_port) = replies
    assert genuine.id == query.id and genuine_port == upstream.port
    assert genuine.answer[0][0].to_text() == "192.168.240.10"
    wrong_id = [m for m, port in forged if m.id != query.id]
    wrong_question = [m for m, _ in forged if m.question[0].name == WRONG_QUESTION]
    wrong_port = [m for m, port in forged if port != upstream.port]
    assert sorted(m.id for m in wrong_id) == [(query.id + 1) & 0xFFFF, (query.id + 2) & 0xFFFF]
    assert len(wrong_question) == 1 and wrong_question[0].id == query.id
    assert len(wrong_port) == 1 and wrong_port[0].id == query.id
    assert all(m.answer[0][0].to_text() == POISON_A for m, _ in forged)


# --- log -------------------------------------------------------------------------------


def test_log_records_transport_name_and_edns(upstream: Upstream) -> None:
    upstream.set_rules([{"suffix": ".", "records": [DB_A]}])

    ask(upstream, "Mixed.Case.example", "AAAA", "+dnssec")
    ask(upstream, "plain.example", "+noedns", "+norecurse")
    ask(upstream, "tcp.example", "+tcp", "+cdflag", "+bufsize=4096")

    udp_dnssec, udp_plain, tcp_cd = upstream.queries()
    assert udp_dnssec | {"t": 0, "id": 0, "src": ""} == {
        "t": 0, "transport": "udp", "qname": "Mixed.Case.example.", "qtype": "AAAA", "id": 0,
        "rd": True, "cd": False, "do": True, "edns": True, "edns_payload": 1232, "src": "",
    }  # fmt: skip
    assert (udp_plain["edns"], udp_plain["edns_payload"], udp_plain["do"]) == (False, None, False)
    assert udp_plain["rd"] is False
    assert (tcp_cd["transport"], tcp_cd["cd"], tcp_cd["edns_payload"]) == ("tcp", True, 4096)
    assert all(q["src"].startswith("127.") for q in (udp_dnssec, udp_plain, tcp_cd))
    assert udp_dnssec["t"] < udp_plain["t"] < tcp_cd["t"] <= time.monotonic()


def test_malformed_packet_is_logged_and_server_keeps_answering(upstream: Upstream) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(os.urandom(5), (upstream.addr, upstream.port))
    with tcp_connect(upstream) as sock:
        sock.sendall(b"\x00\x03abc")  # a framed but unparsable message
        upstream.wait_for_queries(2)

    assert ask(upstream, DB).rdata == ["192.168.240.10"]
    bad_udp, bad_tcp, good = upstream.queries()
    assert (bad_udp["malformed"], bad_udp["len"], bad_udp["transport"]) == (True, 5, "udp")
    assert (bad_tcp["malformed"], bad_tcp["len"], bad_tcp["transport"]) == (True, 3, "tcp")
    assert good["qname"] == DB
    assert upstream.stderr() == ""


# --- control ---------------------------------------------------------------------------


def test_set_rules_changes_behaviour_and_rejects_bad_scripts(upstream: Upstream) -> None:
    assert ask(upstream, DB).rdata == ["192.168.240.10"]

    upstream.set_rules([{"qname": DB, "records": [f"{DB} 60 IN A 192.168.240.99"]}])
    assert ask(upstream, DB).rdata == ["192.168.240.99"]

    with pytest.raises(ValueError, match="unknown action"):
        upstream.set_rules([{"qname": DB, "action": "explode"}])
    assert ask(upstream, DB).rdata == ["192.168.240.99"]  # the old rules stay


def test_process_stops_cleanly_on_exit(tmp_path: Path) -> None:
    with scripted_upstream(tmp_path, []) as up:
        assert ask(up, DB).status == "REFUSED"
    assert up.process.returncode == 0


def test_bad_script_fails_fast_with_stderr(tmp_path: Path) -> None:
    start = time.monotonic()
    with (
        pytest.raises(RuntimeError, match="unknown keys"),
        scripted_upstream(tmp_path, [{"qname": DB, "delay": 100}]),
    ):
        pass  # pragma: no cover - never reached
    assert time.monotonic() - start < 5


def test_nothing_is_sent_off_loopback(tmp_path: Path) -> None:
    for addr in ("10.0.0.1", "0.0.0.0", "localhost", "::1"):
        with pytest.raises(AssertionError), scripted_upstream(tmp_path, [], addr=addr):
            pass  # pragma: no cover - never reached
        with pytest.raises(AssertionError):
            dig(DB, server=addr, port=53)
    for args in (
        ("@192.0.2.1", DB),
        ("+trace", DB),
        ("+tra", DB),
        ("+nssearch", "x."),
        ("-f", "q"),
    ):
        with pytest.raises(AssertionError):
            dig(*args, server="127.0.0.21", port=53)
    with pytest.raises(AssertionError):
        free_port("192.0.2.1")


def test_free_port_is_bindable_for_udp_and_tcp() -> None:
    port = free_port("127.0.0.21")
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp,
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp,
    ):
        udp.bind(("127.0.0.21", port))
        tcp.bind(("127.0.0.21", port))
