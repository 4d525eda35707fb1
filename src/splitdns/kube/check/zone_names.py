"""Zone names one typing slip away from another (SD116): `cluster.lcoal` for the cluster domain,
`svc.acme.internl` beside `svc.acme.internal`. Found in time linear in the names' length, by
looking up each name's slips (one letter dropped, two swapped, one replaced) in a table: a
Corefile of 20,000 blocks must not be compared pair by pair.

A slip counts only inside a label of four letters or more, a replaced letter only in a label of
six or more, and a digit never: `east`/`west`, `eu1`/`eu2` or `zone1`/`zone12` are names of their
own.
Tests: tests/test_corefile_compat.py, tests/test_render.py, tests/test_wireguard_check.py.
"""

from __future__ import annotations

from collections.abc import Iterator

CLUSTER_DOMAIN = "cluster.local."
_SHORTEST = 4          # the shortest label a dropped or swapped letter counts in
_SHORTEST_REPLACED = 6  # the shortest label a replaced letter counts in
_HOLE = "\x00"


def _labels(name: str) -> list[str]:
    return name.rstrip(".").split(".") if name != "." else []


def _spans(name: str, shortest: int) -> Iterator[tuple[int, int]]:
    """Start and end of each label of `name` at least `shortest` letters long."""
    pos = 0
    for label in _labels(name):
        if len(label) >= shortest:
            yield pos, pos + len(label)
        pos += len(label) + 1


def _dropped(name: str) -> Iterator[str]:
    """`name` with one letter (not a digit) of a long enough label dropped."""
    for start, end in _spans(name, _SHORTEST + 1):
        for i in range(start, end):
            if not name[i].isdigit():
                yield name[:i] + name[i + 1:]


def _swapped(name: str) -> Iterator[str]:
    for start, end in _spans(name, _SHORTEST):
        for i in range(start, end - 1):
            if name[i] != name[i + 1] and not (name[i].isdigit() or name[i + 1].isdigit()):
                yield name[:i] + name[i + 1] + name[i] + name[i + 2:]


def _holes(name: str) -> Iterator[str]:
    """`name` with one letter (not a digit) of a long enough label replaced by a hole."""
    for start, end in _spans(name, _SHORTEST_REPLACED):
        for i in range(start, end):
            if not name[i].isdigit():
                yield name[:i] + _HOLE + name[i + 1:]


def cluster_slip(name: str) -> bool:
    """Whether the last labels of `name` are a slip of the cluster domain (`cluster.lcoal`)."""
    tail = ".".join(_labels(name)[-_CLUSTER_SIZE:]) + "."
    if tail == CLUSTER_DOMAIN or abs(len(tail) - len(CLUSTER_DOMAIN)) > 1:
        return False  # most names: decided by their length alone
    return tail in _CLUSTER_SLIPS or CLUSTER_DOMAIN in set(_dropped(tail)) \
        or bool(set(_holes(tail)) & _CLUSTER_HOLES)


def near_misses(names: list[str]) -> list[tuple[str, str]]:
    """(slip, meant) for each pair of distinct `names` one slip apart, each pair once, `meant`
    the one written first; and (slip, CLUSTER_DOMAIN) for a name whose last labels are a slip of
    the cluster domain."""
    order: dict[str, int] = {}
    for i, name in enumerate(names):
        order.setdefault(name, i)  # where each name is first written
    cluster_slips = [name for name in order if cluster_slip(name)]
    cluster_slips_set = set(cluster_slips)
    found: dict[frozenset[str], tuple[str, str]] = {}

    def pair(a: str, b: str) -> None:
        if a in cluster_slips_set or b in cluster_slips_set:
            return  # said against the cluster domain itself, which is what it meant
        if a != b and frozenset((a, b)) not in found:
            meant, slip = sorted((a, b), key=order.__getitem__)
            found[frozenset((a, b))] = (slip, meant)

    holes: dict[str, str] = {}
    for name in order:
        for variant in (*_dropped(name), *_swapped(name)):
            if variant in order:
                pair(name, variant)
        for variant in _holes(name):  # two names with the same hole differ in that letter only
            pair(name, holes.setdefault(variant, name))
    return [(name, CLUSTER_DOMAIN) for name in cluster_slips] + list(found.values())


# The cluster domain's own slips, once (they need the functions above).
_CLUSTER_SIZE = len(_labels(CLUSTER_DOMAIN))
_CLUSTER_SLIPS = frozenset((*_dropped(CLUSTER_DOMAIN), *_swapped(CLUSTER_DOMAIN)))
_CLUSTER_HOLES = frozenset(_holes(CLUSTER_DOMAIN))
