"""The resolver's decisions, sans-io: routing, the cache, the upstream exchange, the tunnel state.

Never touches a socket, a clock, the global random generator or the log: `now` and `rng` come
in as arguments, decisions go out as values. `splitdns.shell` performs them.
"""
