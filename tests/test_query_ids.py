"""Upstream query IDs (upstream.QueryIds): the kernel's CSPRNG, read in bulk, each ID used once.

The end-to-end proof that a running server's upstream IDs look random is hostile test A3
(chi-square over 10,000 IDs); these pin the pool itself."""

from __future__ import annotations

import array
import os

import pytest

from splitdns.shell import upstream


def test_ids_are_the_kernel_random_bytes_read_a_batch_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    real_urandom = os.urandom
    reads: list[bytes] = []

    def counted(size: int) -> bytes:
        data = real_urandom(size)
        reads.append(data)
        return data

    monkeypatch.setattr(upstream.os, "urandom", counted)
    ids = upstream.QueryIds(batch=4)
    drawn = [ids() for _ in range(9)]
    assert [len(r) for r in reads] == [8, 8, 8]  # 4 IDs per read: the 9th needed a third read
    from_kernel = [list(reversed(array.array("H", r))) for r in reads]
    assert drawn == from_kernel[0] + from_kernel[1] + from_kernel[2][:1]
    assert all(0 <= i <= 0xFFFF for i in drawn)


def test_ids_spread_over_the_whole_16_bit_space() -> None:
    ids = upstream.QueryIds()
    drawn = [ids() for _ in range(4096)]
    # 4096 draws from 65536 values give about 3968 distinct ones (sd about 8); a constant,
    # a counter reused or a byte stuck at zero falls far below.
    assert len(set(drawn)) > 3850
    # Each byte takes about 256 values (a stuck byte takes one); fewer than 200 has odds below 1e-40.
    assert len({i >> 8 for i in drawn}) > 200 and len({i & 0xFF for i in drawn}) > 200


def test_a_forked_child_does_not_reuse_the_ids_its_parent_holds() -> None:
    ids = upstream.QueryIds()
    ids()
    assert len(ids._pool) == ids.batch - 1
    pid = os.fork()
    if pid == 0:  # the child: exit at once, whatever happens
        os._exit(0 if len(ids._pool) == 0 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(ids._pool) == ids.batch - 1  # the parent's pool is its own
