"""Whether a Corefile read at a reload is news, as CoreDNS's `reload` decides it.

The running Corefile is known by the SHA-512 of its parsed blocks (so comments and spacing
cause no reload), a Corefile that does not parse by its bytes and its error. A version is
loaded once; one that failed to load is not tried, nor reported, again until the file
changes again (CoreDNS logs a failed reload once, not at every poll). Pure: the shell reads,
parses, digests and swaps; this says whether to, and what the outcome means.
Tests: tests/test_reloads.py.
"""

from __future__ import annotations

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
