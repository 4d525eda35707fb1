"""DNS messages as bytes: the hot path's readers and writers, each proven against dnspython.

No sockets, no clocks, no policy: bytes in, bytes or values out.
"""
