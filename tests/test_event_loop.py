"""Which asyncio `splitdns serve` loads: without TLS support (so without OpenSSL's libraries)
unless the Corefile forwards over TLS. Each case runs in a fresh interpreter, since a module
once imported stays; uvloop (which brings its own TLS support) is kept out as in the resolver image.
"""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
sys.modules["uvloop"] = None  # as in the resolver image
from splitdns import config
from splitdns.errors import ConfigError
from splitdns.shell import event_loop
first, then = sys.argv[1], sys.argv[2]
event_loop.load(config.loads(first, file="Corefile", default_port=15353))
out = {"ssl_loaded": "ssl" in sys.modules, "asyncio": "asyncio" in sys.modules, "tls": event_loop.has_tls()}
try:
    event_loop.check_reload(config.loads(then, file="Corefile", default_port=15353))
    out["reload"] = "ok"
except ConfigError as err:
    out["reload"] = str(err)
import ssl  # whatever asyncio was loaded with, the module itself stays importable
out["ssl_importable"] = ssl.PROTOCOL_TLS_CLIENT is not None
print(json.dumps(out))
"""
PLAIN = ". {\n    forward . 127.0.0.2\n}\n"
OVER_TLS = ". {\n    forward . tls://127.0.0.2 {\n        tls_servername dns.example\n    }\n}\n"


def probe(first: str, then: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", PROBE, first, then], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_a_corefile_without_tls_loads_asyncio_without_ssl() -> None:
    got = probe(PLAIN, PLAIN)
    assert got == {"ssl_loaded": False, "asyncio": True, "tls": False, "reload": "ok", "ssl_importable": True}


def test_a_corefile_that_forwards_over_tls_loads_ssl() -> None:
    got = probe(OVER_TLS, OVER_TLS)
    assert got == {"ssl_loaded": True, "asyncio": True, "tls": True, "reload": "ok", "ssl_importable": True}


def test_a_reload_that_adds_tls_to_a_process_without_it_says_to_restart() -> None:
    got = probe(PLAIN, OVER_TLS)
    assert got["tls"] is False
    assert got["reload"] == ("Corefile:1: forward tls://127.0.0.2: this process started without TLS (its "
                             "Corefile had no tls:// upstream, and TLS costs about 4 MiB of memory); restart "
                             "it to serve a Corefile that forwards over TLS")
