"""A throwaway PKI for the lab's OpenVPN server and client (openssl EC P-256, ~0.1 s).

EC keys and `dh none` avoid `openssl dhparam`, which takes close to a minute on a small VM.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .netns import run

_EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
# OpenVPN's `remote-cert-tls server|client` checks keyUsage and extendedKeyUsage.
_LEAF_EXT = "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyAgreement\n"


@dataclass(frozen=True)
class Pki:
    """Paths of the files OpenVPN needs."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    tls_crypt: Path


def make_pki(directory: Path) -> Pki:
    """Create CA, server and client certificates and a tls-crypt key in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca = directory / "ca.key", directory / "ca.crt"
    run(
        ["openssl", "req", "-x509", *_EC, "-keyout", str(ca_key), "-out", str(ca),
         "-subj", "/CN=splitdns-lab-ca", "-days", "3",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign"]
    )  # fmt: skip
    server = _leaf(directory, "server", "serverAuth", ca, ca_key)
    client = _leaf(directory, "client", "clientAuth", ca, ca_key)
    tls_crypt = directory / "tc.key"
    run(["openvpn", "--genkey", "tls-crypt", str(tls_crypt)])
    for key in directory.glob("*.key"):
        key.chmod(0o600)  # openvpn warns about group/other-readable keys
    return Pki(ca, server[0], server[1], client[0], client[1], tls_crypt)


def _leaf(directory: Path, name: str, eku: str, ca: Path, ca_key: Path) -> tuple[Path, Path]:
    key, csr, cert = directory / f"{name}.key", directory / f"{name}.csr", directory / f"{name}.crt"
    ext = directory / f"{name}.ext"
    ext.write_text(_LEAF_EXT + f"extendedKeyUsage={eku}\n")
    run(["openssl", "req", *_EC, "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}"])
    run(
        ["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
         "-CAcreateserial", "-out", str(cert), "-days", "3", "-extfile", str(ext)]
    )  # fmt: skip
    return cert, key
