"""Whether a reload is news (core/reloads.py), as transcripts: what the lifecycle reads, what
it is told to do. The reload itself, with a real Corefile on disk: test_lifecycle_inprocess.py."""

from __future__ import annotations

from splitdns.core.reloads import Reloads


def test_the_running_version_is_not_loaded_again_and_a_new_one_is() -> None:
    reloads = Reloads("v1")
    assert not reloads.changed("v1")  # comments or spacing changed: the same digest
    assert reloads.changed("v2")
    assert reloads.loaded() == "plugin/reload: Running configuration SHA512 = v2"
    assert reloads.version == "v2" and not reloads.changed("v2")
    assert reloads.changed("v1")  # going back is a change too


def test_a_version_that_failed_is_not_tried_again_until_the_file_changes() -> None:
    reloads = Reloads("v1")
    assert reloads.changed("v2")
    reloads.refused()  # it did not build, or a listener would not open
    assert not reloads.changed("v2") and reloads.version == "v1"
    assert reloads.changed("v3")
    reloads.loaded()
    assert reloads.changed("v2")  # the failure is forgotten once another version loaded


def test_a_corefile_that_does_not_parse_is_reported_once_until_it_changes() -> None:
    reloads = Reloads("v1")
    assert reloads.unparsed("broken-a")
    reloads.refused()
    assert not reloads.unparsed("broken-a")  # the same bytes and error: already reported
    assert reloads.unparsed("broken-b")
    reloads.refused()
    assert reloads.changed("v2")  # fixed
    reloads.loaded()
    assert reloads.unparsed("broken-a") and reloads.version == "v2"


def test_a_failure_before_any_version_was_read_remembers_none() -> None:
    reloads = Reloads("v1")
    assert reloads.changed("v2")
    reloads.loaded()
    reloads.refused()  # the file could not be read at all: nothing tried, nothing remembered
    assert reloads.failed == "" and reloads.changed("v3")
