"""CPU and memory requests from what `make bench` and bench/webhook.py measured, for a stated rate.

Plain numbers and arithmetic, nothing of ours imported: the command line's parser reads the
defaults for its help, and `splitdns serve` must not pay for the manifests' imports to parse its flags.
Tests: tests/test_render.py.
"""

from __future__ import annotations

import math

# One process answers on one core (no threads answer queries or reviews): a request above a core
# buys nothing. Never under 10m either: a request is also the container's weight when the node's
# CPU is contended, and a resolver starved then is DNS timeouts for the app.
MIN_MILLICORES, MAX_MILLICORES = 10, 1000
# A quarter above the median: the rounds above it (below).
HEADROOM = 1.25

# The DNS container: the "A realistic sidecar load" line of bench/results.md (bench/mix.py). A
# pod's mix at 1,000 q/s (90 % hits, 10 % misses, 4 % NXDOMAIN through the search list) took
# splitdns 12.0 % of one core at the median of 3 rounds (11.8-19.6; 1 Dec, make bench at 3e9229b):
# 120 millicores per 1,000 q/s, scaled linearly from that one measured rate.
DNS_MILLICORES_PER_1000_QPS = 120
# The rate it is sized for unless told (--expected-qps). A typical app pod asks far fewer than
# 1,000 names a second: one that opens 10 new outbound connections a second, with no cache of its
# own, asks about 80 (A and AAAA, through the search list; mostly cache hits here). 100 q/s gives
# 15m, where a whole Istio proxy requests 100m and NodeLocal DNSCache 25m for a node.
TYPICAL_QPS = 100

# The DNS container's memory: the resolver image's RSS at the end of the same 1,000 q/s of the mix
# (`make bench`, the splitdns-image row: 20.2 MiB; idle 19.8; 2 Dec, one quick round), plus what
# the first scrape of /metrics adds (prometheus_client and what it imports, loaded then: 19.8 ->
# 27.8 MiB in the image), since the rendered Corefile serves metrics and a monitored fleet scrapes
# them. The request is their sum with the same quarter above. RSS hardly follows the rate (the
# cache does), so one figure serves every --expected-qps; the limit (manifests) is for a full
# `cache_memory`.
DNS_RSS_MIB_AT_1000_QPS = 20.2
METRICS_RSS_MIB = 8.0


def dns_memory_request_mib() -> int:
    return math.ceil(round((DNS_RSS_MIB_AT_1000_QPS + METRICS_RSS_MIB) * HEADROOM, 6))


# The webhook: bench/webhook.py measured 0.9-1.9 ms of CPU per review (bench/README.md, "The
# admission webhook"; the most at 50/s, where each review wakes an idle process): 2 ms.
WEBHOOK_CPU_MS_PER_REVIEW = 2.0
# The review rate each replica is sized for unless told (--webhook-review-rate). Nearly every pod
# is created by a controller, and kube-controller-manager sends at most 20 requests a second to
# the API server by default (--kube-api-qps): each replica is sized for all of them, since one
# replica takes every review while the other is drained.
TYPICAL_REVIEW_RATE = 20


def _millicores(cores: float) -> int:
    # Rounded first, so that a float's last bit never adds a millicore (0.15 cores is 150m).
    return max(MIN_MILLICORES, math.ceil(round(cores * HEADROOM * 1000, 6)))


def dns_millicores(qps: int) -> int:
    return _millicores(DNS_MILLICORES_PER_1000_QPS / 1000 / 1000 * qps)


def webhook_millicores(reviews: int) -> int:
    return _millicores(WEBHOOK_CPU_MS_PER_REVIEW / 1000 * reviews)


def most_qps() -> int:
    return int(MAX_MILLICORES / 1000 / (DNS_MILLICORES_PER_1000_QPS / 1000 / 1000 * HEADROOM))


def most_reviews() -> int:
    return int(MAX_MILLICORES / 1000 / (WEBHOOK_CPU_MS_PER_REVIEW / 1000 * HEADROOM))
