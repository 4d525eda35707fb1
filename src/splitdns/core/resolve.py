"""The life of a query, told once: how the core's modules (`core/`) answer it. No code lives here.

Never touches a socket, a clock or the global random generator: `now` and `rng` come in as
arguments, decisions go out as values (decisions.py). The shell (shell/) does the I/O.

The life of a query
-------------------
A query arrives on a listener (an address and port). `wire.parse_query` reads it without
dnspython when it has the common shape; anything else goes through dnspython first and
ends up as the same `wire.Query`, or as an error reply (FORMERR, NOTIMP, REFUSED).

`Router.route` (routing.py) picks the server block: the longest zone that is a whole-label
suffix of the name, so `svc.acme.internal` owns `db.svc.acme.internal` and the apex but
never `svc.acme.internal.example.net`; the root zone `.` catches what nothing else owns;
with no match the answer is REFUSED. Block order in the Corefile does not matter.

A repeat of a query answered within the same second of its cache entry's life is answered
from the listener's memo (memo.py); a fresh cache entry, or an answer the block made itself,
is rendered from wire bytes (`entries.render`), with the client's ID, spelling and flags and
a counted-down TTL. That is the hot path (shell/udp.py), and it never builds a dnspython
message.

Anything else is decided by the zone (zone.py): `Zone.begin(query, now)` walks the block's
steps in `directives.REGISTRY`'s order, as CoreDNS's plugin.cfg orders its plugins. `cache` answers a
fresh entry (and may want a prefetch behind it); `rewrite`, `template` and `hosts` answer
what the block itself knows, or change the name that goes upstream (local.py); `loop`
answers SERVFAIL while the zone is known to loop (loop.py), and recognises our own loop
probe coming back; `openvpn` answers at once while the tunnel is down (stale, or SERVFAIL
with the reason); `forward` picks the block's first `forward` whose FROM covers the name
(and no `except` excludes it), else SERVFAIL as CoreDNS's "no next plugin". An expired entry
within serve_stale's window is answered at once with a 30 s TTL (at most the cap) while one
refresh goes upstream; after a refresh is tried, the next waits STALE_RECHECK (RFC 8767), so
a dead upstream is not asked again by every client of a stale name. `begin` returns an
`Answer` (bytes now, perhaps a refresh behind) or a `Forward` (what to ask, of which forward).

Where the Corefile names the pod's resolv.conf (`autopath`), the zones know the search list
every client walks (names.py, search.py; which guard applies to which zone is decided at
load). After `hosts` and the tunnel's state, a zone answers NXDOMAIN itself for a try that put
a search suffix after a name another zone owns (a private name never leaves its tunnel that
way), for a name the Kubernetes DNS schema rules out (`k8s_schema`), and NODATA for AAAA where
the tunnel carries no IPv6 (`filter_aaaa`); these answers are cached like any other. A
client's first try (NAME under the first search domain) is decided as any query, and
`autopath` hands the shell a `Search` with the tries that follow: the shell resolves each
through the router (none starts a walk of its own) until one is not NXDOMAIN, and the client
gets it under a CNAME from the name it asked, kept in the asking zone's cache.

`Zone.depart` joins the query to the identical one already in flight, so one upstream
exchange answers them all, or starts a `Flight` (flight.py), or refuses it when `limits
pending` exchanges are already waiting. The flight owns the miss from there: an `Exchange`
(exchange.py) walks the forward's upstreams in policy order: each `Send` says which
upstream, over UDP or TCP, and for how long to wait; the shell does it with a fresh socket
and a fresh random ID, drops any reply that fails `wire.reply_matches` and keeps waiting,
and reports back to the flight `answered` or `failed`, which it counts per upstream.
A truncated UDP reply is asked again over TCP; a failure moves to the next upstream until
the attempts or the overall deadline run out, and then the client gets SERVFAIL. Upstreams
that keep failing are marked down (more than `max_fails` failures in a row) and skipped until
a health probe gets a reply; when all are down, the query gets SERVFAIL at once with the
reason (unlike CoreDNS, which tries one anyway unless `failfast_all_unhealthy_upstreams`;
here `failfast_all_unhealthy_upstreams off` does that).

When the exchange ends, a reply whose rcode the forward's `next` lists goes on to the next
covering forward; otherwise the flight settles: the reply comes back under the client's
names (`rewrite`), loses the authority and additional records another zone owns (`scrub`:
the catch-all's server does not speak for the tunnel's names), loses addresses into private
networks (`private_addresses`), is stored in the cache if it may be, and the flight lands
(leaves the zone's table: exactly once, or the flight raises).
`Zone.finish` renders it for each waiting client (or, for `serve_stale verify`, answers the
stale entry when the exchange failed). A UDP reply larger than the client can take is
replaced by a truncated one (TC set), so the client retries over TCP.
"""
