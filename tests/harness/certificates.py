"""A throwaway certificate authority for tests of TLS: a CA, a server certificate for
127.0.0.1 and localhost, and a client certificate, all PEM, made with the openssl command
(Debian's openssl; the `cryptography` package is not among the project's dependencies).

Keys are RSA 2048 in PKCS#8 without a password: what Kafka's PEM key store reads without
a key password and what Python's ssl and librdkafka load alike."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

DAYS = "2"  # long enough for any test run, short enough to be useless if it leaks


@dataclass(frozen=True)
class Certificates:
    ca: Path  # the CA's certificate: what clients and the broker trust
    server_chain: Path  # the server's certificate, then the CA's
    server_key: Path
    client_cert: Path
    client_key: Path


def make_certificates(folder: Path) -> Certificates:
    if shutil.which("openssl") is None:
        raise RuntimeError("the openssl command is missing (Debian package openssl)")
    folder.mkdir(parents=True, exist_ok=True)
    ca, ca_key = folder / "ca.pem", folder / "ca.key"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", DAYS,
        "-keyout", ca_key, "-out", ca, "-subj", "/CN=zerotrace test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    server = _signed(
        folder, "server", ca, ca_key, "subjectAltName=DNS:localhost,IP:127.0.0.1", "serverAuth"
    )
    chain = folder / "server-chain.pem"
    chain.write_text(server.read_text() + ca.read_text())
    client = _signed(folder, "client", ca, ca_key, "subjectAltName=DNS:zerotrace", "clientAuth")
    return Certificates(ca, chain, folder / "server.key", client, folder / "client.key")


def _signed(folder: Path, name: str, ca: Path, ca_key: Path, names: str, usage: str) -> Path:
    key, request, cert = folder / f"{name}.key", folder / f"{name}.csr", folder / f"{name}.pem"
    _openssl(
        "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", request,
        "-subj", f"/CN=zerotrace test {name}",
    )  # fmt: skip
    extensions = folder / f"{name}.ext"
    extensions.write_text(
        f"{names}\nextendedKeyUsage={usage}\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "basicConstraints=CA:FALSE\nsubjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid,issuer\n"
    )
    _openssl(
        "x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
        "-days", DAYS, "-extfile", extensions, "-out", cert,
    )  # fmt: skip
    return cert


def _openssl(*args: str | Path) -> None:
    result = subprocess.run(
        ["openssl", *map(str, args)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {result.stderr.strip()[-300:]}")
