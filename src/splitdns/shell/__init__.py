"""The asyncio shell: sockets, listeners, upstream I/O, HTTP endpoints, OpenVPN, logs, the
server's life in a pod. It performs what `splitdns.core` decides.
"""
