"""Whether a Corefile read at a reload is news, as CoreDNS's `reload` decides it.

The running Corefile is known by the SHA-512 of its parsed blocks (so comments and spacing
cause no reload), a Corefile that does not parse by its bytes and its error. A version is
loaded once; one that failed to load is not tried, nor reported, again until the file
changes again (CoreDNS logs a failed reload once, not at every poll). Pure: the shell reads,
parses, digests and swaps; this says whether to, and what the outcome means.
Tests: tests/test_reloads.py.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from splitdns import corefile

# hashlib's own SHA-512, without the OpenSSL libcrypto that importing hashlib loads (about 4 MiB
# of RSS, for digests the resolver never asks for).
if TYPE_CHECKING:
    from hashlib import sha512
else:
    try:
        from _sha512 import sha512
    except ImportError:  # a Python built without it
        from hashlib import sha512


def digest(blocks: list[corefile.ServerBlock]) -> str:
    """SHA-512 of the parsed blocks, as CoreDNS: comments and spacing do not cause a reload."""
    def statement(st: corefile.Statement) -> object:
        return [[t.text for t in st.tokens], [statement(b) for b in st.body or ()]]

    data = [[[k.text for k in b.keys], [statement(d) for d in b.directives]] for b in blocks]
    return sha512(json.dumps(data).encode()).hexdigest()


def fingerprint(text: bytes, error: str) -> str:
    """A Corefile that does not parse, told apart by its bytes (b"": unreadable) and its error."""
    data = sha512(error.encode())
    data.update(text)
    return data.hexdigest()


UNPARSED = "unparsed:"


class Reloads:
    """The running version, the last that failed, and the one being tried."""

    def __init__(self, version: str = "") -> None:
        self.version = version  # the digest of the Corefile in service ("" before the first)
        self.failed = ""        # the last version that could not be loaded
        self.trying = ""        # the version a reload is trying now

    def unparsed(self, fingerprint: str) -> bool:
        """The Corefile does not parse (`fingerprint`: its bytes and error, digested): True
        when that is news to report, False when it was reported already."""
        self.trying = UNPARSED + fingerprint
        return self.trying != self.failed

    def changed(self, version: str) -> bool:
        """The Corefile parses to `version`: True when it is to be loaded (neither the one
        running nor the one that failed last)."""
        self.trying = version
        return version not in (self.version, self.failed)

    def refused(self) -> None:
        """The version being tried could not be loaded: not again until the file changes."""
        self.failed, self.trying = self.trying, ""

    def loaded(self) -> str:
        """The version being tried is in service; what CoreDNS logs then."""
        self.version, self.failed, self.trying = self.trying, "", ""
        return f"plugin/reload: Running configuration SHA512 = {self.version}"
