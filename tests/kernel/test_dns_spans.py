"""DNS through the real collector, embedded (`zerotrace run --port P -- CLIENT`): a real DNS
server (tests/harness/dns_server.py, on port 53 of a free 127/8 address) and three clients
with a known workload, run in one mount namespace whose /etc/resolv.conf points at it: a plain
UDP client (dnslib, sendto/recvfrom on an unconnected socket), the same over TCP, and the
glibc resolver (getaddrinfo: connect() + sendmmsg of A and AAAA + recvfrom). Every query comes
out as exactly one `dns.client` span with its question, type, response code and answers;
against a server that answers 40 ms late, each span's duration is within 1 ms of what the
client measured around its send and receive. P need not be 53: DNS is always wanted. The
capture path (`zerotrace capture` + `zerotrace analyze --json`) gives the same spans."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests.ebpf_required import require_ebpf
from tests.harness.dns_server import (
    GLIBC_CLIENT,
    PLAIN_CLIENT,
    TCP_CLIENT,
    DnsServer,
    expected_span,
    free_loopback,
    glibc_command,
    resolv_conf,
)
from tests.harness.services import REPO, reap
from zerotrace import names
from zerotrace.store import Query
from zerotrace.store_duckdb import DuckDBStore

require_ebpf()

# 7 UDP queries of the plain client, 5 over TCP, and 7 of the glibc resolver (A and AAAA for
# each AF_UNSPEC lookup, A alone for AF_INET): 19 spans, a prime (bcc's rule).
PLAIN = [
    ["alpha.zt.test", "A"], ["alias.zt.test", "A"], ["beta.zt.test", "A"],
    ["beta.zt.test", "AAAA"], ["nope.zt.test", "A"], ["gamma.zt.test", "TXT"],
    ["gamma.zt.test", "A"],
]  # fmt: skip
TCP = [
    ["alpha.zt.test", "A"], ["beta.zt.test", "A"], ["alias.zt.test", "A"],
    ["nope.zt.test", "A"], ["gamma.zt.test", "TXT"],
]  # fmt: skip
GLIBC = [
    ["alpha.zt.test", "UNSPEC"], ["beta.zt.test", "UNSPEC"], ["gamma.zt.test", "UNSPEC"],
    ["alias.zt.test", "INET"],
]  # fmt: skip
GLIBC_QUERIES = [
    [name, qtype]
    for name, family in GLIBC
    for qtype in (("A", "AAAA") if family == "UNSPEC" else ("A",))
]
# 5 queries answered 40 ms late.
SLOW_MS = 40
SLOW = [["alpha.zt.test", "A"], ["beta.zt.test", "A"], ["gamma.zt.test", "TXT"],
        ["alias.zt.test", "A"], ["nope.zt.test", "A"]]  # fmt: skip

# Runs each (script, queries) in turn with the server's address and port; its output, the
# clients' JSON lines, is theirs.
DRIVER = textwrap.dedent(
    r"""
    import json, subprocess, sys
    address, port, runs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    for script, queries in runs:
        subprocess.run([sys.executable, "-c", script, address, port, json.dumps(queries)],
                       check=True)
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_observed(
    tmp_path: Path, address: str, runs: list[Any], port: int = 53
) -> tuple[list[Any], list[Any], str]:
    """The DNS spans of `zerotrace run --port PORT` around DRIVER, the clients' lines, and the
    run's closing summary."""
    store_file = tmp_path / "zt.duckdb"
    client = [sys.executable, "-c", DRIVER, address, "53", json.dumps(runs)]
    run = subprocess.run(
        [
            sys.executable, "-m", "zerotrace_cli", "run", "--port", str(port), "--no-files",
            "--no-tls", "--store", str(store_file),
            "--http-port", str(free_port()), "--grpc-port", str(free_port()),
            "--", *glibc_command(resolv_conf(tmp_path, address), client),
        ],
        capture_output=True, text=True, cwd=REPO,
        env={**os.environ, "ZEROTRACE_HOME": str(tmp_path / "home")}, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    store = DuckDBStore(str(store_file))
    try:
        found = [
            s
            for s in store.search(names.INDEX_SPANS, Query(limit=10_000))
            if str(s["kind"]).startswith("dns.")
        ]
    finally:
        store.close()
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    summary = run.stdout[run.stdout.rfind("summary:") :]
    assert "lost 0, shed 0" in summary, summary  # nothing of the workload dropped
    return found, lines, summary


def captured_spans(tmp_path: Path, command: list[str]) -> list[Any]:
    """The DNS spans of `zerotrace capture -i lo --port 53 -w FILE` while *command* runs (it
    must exit 0), then `zerotrace analyze FILE --json OUT`."""
    env = {**os.environ, "ZEROTRACE_HOME": str(tmp_path / "home")}
    pcap, out = tmp_path / "run.pcap", tmp_path / "analyzed.jsonl"
    capture = subprocess.Popen(
        [sys.executable, "-m", "zerotrace_cli", "capture", "-i", "lo", "--port", "53",
         "-w", str(pcap)],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        # The capture socket is open and bound before the file is created (af_packet.capture).
        deadline = time.monotonic() + 60
        while not pcap.exists():
            assert capture.poll() is None, capture.communicate()[1]
            assert time.monotonic() < deadline, "zerotrace capture did not start"
            time.sleep(0.05)
        client = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=300)
        assert client.returncode == 0, client.stderr[-3000:]
        capture.send_signal(signal.SIGTERM)
        _, err = capture.communicate(timeout=60)
        assert capture.returncode == 0, err
        assert " 0 dropped by the kernel" in err, err
    finally:
        reap(capture)
    analyze = subprocess.run(
        [sys.executable, "-m", "zerotrace_cli", "analyze", str(pcap), "--json", str(out)],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=300,
    )  # fmt: skip
    assert analyze.returncode == 0, analyze.stdout[-3000:] + analyze.stderr[-3000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    return [
        r
        for r in records
        if r["record"] == names.DERIVED_SPAN.record and str(r["kind"]).startswith("dns.")
    ]


def _key(span: dict[str, Any]) -> tuple[str, ...]:
    attrs = span["attributes"]
    return (
        str(attrs[names.ATTR_NETWORK_TRANSPORT]),
        str(span["name"]),
        *(str(attrs.get(k, "")) for k in sorted(expected_span("x", "A")) if k != "name"),
        str(attrs.get(names.ATTR_DNS_ANSWERS, "")),
    )


def _expected(transport: str, queries: list[list[str]]) -> Counter[tuple[str, ...]]:
    out: Counter[tuple[str, ...]] = Counter()
    for name, qtype in queries:
        want = expected_span(name, qtype)
        attrs = {k: v for k, v in want.items() if k != "name"}
        fake = {"name": want["name"], "attributes": {names.ATTR_NETWORK_TRANSPORT: transport}}
        fake["attributes"].update(attrs)  # type: ignore[attr-defined]
        out[_key(fake)] += 1
    return out


def test_every_dns_query_is_one_span(tmp_path: Path) -> None:
    """--port names another port: DNS (53) is wanted anyway (bpf/socket.c "Datagrams")."""
    address = free_loopback()
    runs = [[PLAIN_CLIENT, PLAIN], [TCP_CLIENT, TCP], [GLIBC_CLIENT, GLIBC]]
    with DnsServer(address):
        spans, lines, summary = run_observed(tmp_path, address, runs, port=free_port())
    assert len(lines) == len(PLAIN) + len(TCP) + len(GLIBC)
    glibc_found = [line["found"] for line in lines if "family" in line]
    assert glibc_found[0] == ["10.0.0.1"], glibc_found
    want = _expected("udp", PLAIN) + _expected("tcp", TCP) + _expected("udp", GLIBC_QUERIES)
    assert Counter(_key(s) for s in spans) == want, summary
    assert len(spans) == 19
    for span in spans:
        assert {span["kind"], span["status"]} <= {"dns.client", "OK", "ERROR"}
        assert span["status"] == ("ERROR" if "nope" in str(span["name"]) else "OK")
        attrs = span["attributes"]
        assert (attrs[names.ATTR_SERVER_ADDRESS], attrs[names.ATTR_SERVER_PORT]) == (address, "53")
        assert int(span["end_ns"]) > int(span["start_ns"])


def test_dns_latency_matches_a_slow_server(tmp_path: Path) -> None:
    address = free_loopback()
    with DnsServer(address, delay_ms=SLOW_MS):
        spans, lines, _ = run_observed(tmp_path, address, [[PLAIN_CLIENT, SLOW]])
    assert len(spans) == len(SLOW) == len(lines)
    spans.sort(key=lambda s: int(s["start_ns"]))
    for span, line, (name, qtype) in zip(spans, lines, SLOW, strict=True):
        assert str(span["name"]) == f"{qtype} {name}"
        took = int(span["end_ns"]) - int(span["start_ns"])
        assert took >= SLOW_MS * 1_000_000
        # The client's clock runs from before its send to after its receive: the span is
        # inside it, by the time Python takes around two syscalls.
        assert 0 <= line["ns"] - took < 1_000_000, (line, took)


def test_captured_dns_gives_the_same_spans(tmp_path: Path) -> None:
    """`zerotrace capture -i lo --port 53 -w FILE` around the same workload, then `zerotrace
    analyze FILE --json`: the same spans, from the packets (UDP datagrams and TCP)."""
    address = free_loopback()
    runs = [[PLAIN_CLIENT, PLAIN], [TCP_CLIENT, TCP], [GLIBC_CLIENT, GLIBC]]
    client = [sys.executable, "-c", DRIVER, address, "53", json.dumps(runs)]
    with DnsServer(address):
        spans = captured_spans(tmp_path, glibc_command(resolv_conf(tmp_path, address), client))
    want = _expected("udp", PLAIN) + _expected("tcp", TCP) + _expected("udp", GLIBC_QUERIES)
    assert Counter(_key(s) for s in spans) == want
    for span in spans:
        assert span["attributes"][names.ATTR_SERVER_ADDRESS] == address
        assert int(span["end_ns"]) > int(span["start_ns"])
