"""A real DNS server for tests, with a known zone, a known delay and known workloads.

`python -m tests.harness.dns_server --address A --port P [--delay-ms D]` answers over UDP and
TCP on A:P from ZONE (dnslib encodes; unknown names get NXDOMAIN), each answer sent D ms after
its query came (one thread per query: queries sent together are delayed together, not in a
row). `DnsServer` starts and stops it; `free_loopback()` picks an address of 127/8 with port 53
free, so the glibc resolver (which asks port 53 only) can be pointed at it through a private
resolv.conf (`resolv_conf`, `glibc_command`: `unshare --mount` and a bind mount, so nothing
else on the machine sees it).

The workloads (`PLAIN_CLIENT`, `TCP_CLIENT`, `GLIBC_CLIENT`) are scripts run as
`python -c SCRIPT ADDRESS PORT QUERIES_JSON`; each prints one JSON line per query with the
nanoseconds it measured from just before its send to just after its receive. `expected_span`
says what the span of one query must hold; a distributed test can reuse all of this.
"""

from __future__ import annotations

import argparse
import random
import socket
import socketserver
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from tests.harness.services import REPO, reap

DOMAIN = "zt.test"
# name -> {type: [answer text]}: what the server answers (a CNAME is followed inside the zone).
ZONE: dict[str, dict[str, list[str]]] = {
    f"alpha.{DOMAIN}": {"A": ["10.0.0.1"]},
    f"beta.{DOMAIN}": {"A": ["10.0.0.2", "10.0.0.3"], "AAAA": ["fd00::2"]},
    f"gamma.{DOMAIN}": {"A": ["10.0.0.4"], "TXT": ["zerotrace"]},
    f"alias.{DOMAIN}": {"CNAME": [f"alpha.{DOMAIN}"]},
}
TTL = 60


@dataclass(frozen=True)
class Answer:
    rcode: str  # NOERROR or NXDOMAIN
    answers: tuple[str, ...]  # as the span's dns.answers lists them, in order


def answer_for(name: str, qtype: str) -> Answer:
    """What the server answers to (name, type)."""
    records = ZONE.get(name.rstrip(".").lower())
    if records is None:
        return Answer("NXDOMAIN", ())
    if "CNAME" in records and qtype != "CNAME":
        target = records["CNAME"][0]
        return Answer("NOERROR", (target, *answer_for(target, qtype).answers))
    return Answer("NOERROR", tuple(records.get(qtype, ())))


def expected_span(name: str, qtype: str) -> dict[str, str]:
    """The attributes (as the store gives them back: strings) of the span of one query."""
    answer = answer_for(name, qtype)
    out = {
        "name": f"{qtype} {name}",
        "dns.question.name": name,
        "zerotrace.dns.question.type": qtype,
        "zerotrace.dns.response_code": answer.rcode,
        "zerotrace.dns.answer_count": str(len(answer.answers)),
    }
    # dns.answers lists addresses and CNAME targets only (dns_wire), not TXT and the like.
    if answer.answers and qtype in ("A", "AAAA", "CNAME"):
        out["dns.answers"] = ",".join(answer.answers)
    return out


def _reply(data: bytes) -> bytes:
    from dnslib import QTYPE, RCODE, RR, DNSRecord  # type: ignore[import-untyped]

    request = DNSRecord.parse(data)
    reply = request.reply()
    qname = str(request.q.qname).rstrip(".")
    qtype = QTYPE[request.q.qtype]
    answer = answer_for(qname, qtype)
    if answer.rcode == "NXDOMAIN":
        reply.header.rcode = RCODE.NXDOMAIN
    owner = qname
    for text in answer.answers:
        kind = "CNAME" if text.endswith(DOMAIN) and qtype != "CNAME" else qtype
        zone_line = f"{owner}. {TTL} IN {kind} {text + '.' if kind == 'CNAME' else text}"
        reply.add_answer(*RR.fromZone(zone_line))
        if kind == "CNAME":
            owner = text
    return bytes(reply.pack())


class _Udp(socketserver.ThreadingUDPServer):
    daemon_threads = True
    delay_s = 0.0


class _Tcp(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    delay_s = 0.0


class _UdpHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        data, sock = self.request
        time.sleep(self.server.delay_s)  # type: ignore[attr-defined]
        sock.sendto(_reply(data), self.client_address)


class _TcpHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        conn = self.request
        while True:
            head = _read_exact(conn, 2)
            if head is None:
                return
            body = _read_exact(conn, int.from_bytes(head, "big"))
            if body is None:
                return
            time.sleep(self.server.delay_s)  # type: ignore[attr-defined]
            out = _reply(body)
            conn.sendall(len(out).to_bytes(2, "big") + out)


def _read_exact(conn: socket.socket, n: int) -> bytes | None:
    got = b""
    while len(got) < n:
        part = conn.recv(n - len(got))
        if not part:
            return None
        got += part
    return got


def serve(address: str, port: int, delay_ms: float) -> None:
    udp = _Udp((address, port), _UdpHandler)
    tcp = _Tcp((address, port), _TcpHandler)
    udp.delay_s = tcp.delay_s = delay_ms / 1000
    threading.Thread(target=tcp.serve_forever, daemon=True).start()
    print("ready", flush=True)
    udp.serve_forever()


def free_loopback() -> str:
    """An address of 127/8 on which UDP and TCP port 53 are free now."""
    for _ in range(50):
        address = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(2, 254)}"
        try:
            for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
                with socket.socket(socket.AF_INET, kind) as s:
                    s.bind((address, 53))
        except OSError:
            continue
        return address
    raise RuntimeError("no free loopback address with port 53")


class DnsServer:
    """The server in a child process; a context manager that stops and reaps it."""

    def __init__(self, address: str, port: int = 53, delay_ms: float = 0) -> None:
        self.address, self.port = address, port
        self.proc = subprocess.Popen[str](
            [
                *(sys.executable, "-m", "tests.harness.dns_server", "--address", address),
                *("--port", str(port), "--delay-ms", str(delay_ms)),
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # blocks until the sockets are bound
        if line.strip() != "ready":
            reap(self.proc)
            raise RuntimeError(f"DNS server did not start on {address}:{port}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        reap(self.proc)

    def __enter__(self) -> DnsServer:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def resolv_conf(directory: Path, address: str) -> Path:
    """A resolv.conf that sends the glibc resolver to *address* only, once."""
    path = directory / "resolv.conf"
    path.write_text(f"nameserver {address}\noptions attempts:1 timeout:5\n")
    return path


def glibc_command(resolv: Path, command: Sequence[str]) -> list[str]:
    """*command* run with *resolv* as its /etc/resolv.conf, seen by it alone (a private mount
    namespace: `unshare --mount` makes mounts private)."""
    mount = f'mount --bind {resolv} /etc/resolv.conf && exec "$@"'
    return ["unshare", "--mount", "sh", "-c", mount, "sh", *command]


# Each: python -c SCRIPT ADDRESS PORT '[["name", "TYPE"], ...]'.
PLAIN_CLIENT = textwrap.dedent(
    r"""
    import json, socket, sys, time
    from dnslib import DNSRecord
    address, port, queries = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for name, qtype in queries:
        packet = DNSRecord.question(name, qtype).pack()
        t0 = time.monotonic_ns()
        s.sendto(packet, (address, port))
        data, _ = s.recvfrom(4096)
        t1 = time.monotonic_ns()
        print(json.dumps({"name": name, "type": qtype, "ns": t1 - t0}), flush=True)
    s.close()
    """
)
TCP_CLIENT = textwrap.dedent(
    r"""
    import json, socket, sys, time
    from dnslib import DNSRecord
    address, port, queries = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    s = socket.create_connection((address, port))
    for name, qtype in queries:
        packet = DNSRecord.question(name, qtype).pack()
        t0 = time.monotonic_ns()
        s.sendall(len(packet).to_bytes(2, "big") + packet)
        head = b""
        while len(head) < 2:
            head += s.recv(2 - len(head))
        need, body = int.from_bytes(head, "big"), b""
        while len(body) < need:
            body += s.recv(need - len(body))
        t1 = time.monotonic_ns()
        print(json.dumps({"name": name, "type": qtype, "ns": t1 - t0}), flush=True)
    s.close()
    """
)
# getaddrinfo: AF_UNSPEC asks A and AAAA (glibc sends both with one sendmmsg on a connected
# UDP socket), AF_INET asks A only. Queries: [name, "UNSPEC" | "INET"].
GLIBC_CLIENT = textwrap.dedent(
    r"""
    import json, socket, sys, time
    queries = json.loads(sys.argv[3])
    for name, family in queries:
        t0 = time.monotonic_ns()
        try:
            found = sorted({a[4][0] for a in socket.getaddrinfo(
                name, 80, getattr(socket, "AF_" + family), socket.SOCK_STREAM)})
        except socket.gaierror as exc:
            found = [str(exc)]
        t1 = time.monotonic_ns()
        print(json.dumps({"name": name, "family": family, "found": found, "ns": t1 - t0}),
              flush=True)
    """
)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=53)
    parser.add_argument("--delay-ms", type=float, default=0)
    args = parser.parse_args(argv)
    serve(args.address, args.port, args.delay_ms)


if __name__ == "__main__":
    main()
