"""Deadlines of upstream attempts on loop callbacks, one loop timer for many attempts.

The attempts sent in the same millisecond with the same timeout share one `Deadline`: a
`call_at` and its `cancel` per attempt cost more than the epoll registration of its socket
(bench/README.md, "Figures behind the code"). An attempt that ends leaves its slot empty, so an
answered miss is not kept alive by a straggler of its turn; the timer goes when the last
one ends.
Tests: tests/test_misses.py.
"""

from __future__ import annotations

import asyncio
import math
from typing import Protocol


class Waiting(Protocol):
    """What waits under a deadline (misses.py's `Miss`): told when it has passed."""

    def expire(self) -> None: ...


class Deadline:
    """When the attempts in `members` expire; `live` of them still wait."""

    __slots__ = ("at", "live", "members", "timer")

    def __init__(self, at: float) -> None:
        self.at = at
        self.members: list[Waiting | None] = []
        self.live = 0
        self.timer: asyncio.TimerHandle | None = None


class Deadlines(dict[float, Deadline]):
    """The deadlines some attempt still waits for, by when."""

    def wait(self, loop: asyncio.AbstractEventLoop, member: Waiting,
             timeout: float) -> tuple[Deadline, int]:
        """The deadline `member`'s attempt waits under, and its slot there. Deadlines are
        rounded up to the millisecond (uvloop's clock counts milliseconds anyway), so the
        attempts of one batch of queries share one."""
        at = math.ceil((loop.time() + timeout) * 1000) / 1000
        deadline = self.get(at)
        if deadline is None:
            deadline = self[at] = Deadline(at)
            deadline.timer = loop.call_at(at, self._expire, deadline)
        deadline.members.append(member)
        deadline.live += 1
        return deadline, len(deadline.members) - 1

    def release(self, deadline: Deadline, slot: int) -> None:
        """An attempt ended before its deadline: the last one takes the timer with it."""
        deadline.members[slot] = None
        deadline.live -= 1
        if not deadline.live:
            assert deadline.timer is not None
            deadline.timer.cancel()
            if self.get(deadline.at) is deadline:
                del self[deadline.at]

    def _expire(self, deadline: Deadline) -> None:
        if self.get(deadline.at) is deadline:
            del self[deadline.at]
        for member in deadline.members:
            if member is not None:
                member.expire()
