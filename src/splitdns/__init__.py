"""splitdns: an in-pod split-DNS resolver configured by a Corefile."""

__version__ = "0.1.0"
