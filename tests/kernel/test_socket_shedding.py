"""Kernel test: when the reader falls behind, the socket probe sheds whole connections, counted,
instead of losing events at random in a full ring.

A workload (one process: a keep-alive HTTP/1.1 server and client threads making 150 small
requests each) runs two waves of 4 clients. The first is read as it comes; the second runs while
nobody reads the ring: a reader starved of CPU, as on a node whose cores are all busy beyond
zerotrace's budget. The ring is small (256 KiB), so the second wave would overflow it several
times over. Then the ring is read and the events go through the collector's records and the
correlator: nothing is lost, connections were shed and counted, every span that comes out is a
whole exchange, each connection's spans are its first requests in order, and the first wave's
connections are whole.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.ebpf_required import require_ebpf

require_ebpf("syscalls/sys_enter_sendmsg")

from zerotrace import names  # noqa: E402
from zerotrace.socket_batch import socket_data_of  # noqa: E402
from zerotrace_collector.feeds import RawRecord, SocketFeed  # noqa: E402
from zerotrace_collector.probes import socket_ring  # noqa: E402
from zerotrace_collector.probes.socket import SocketProbe  # noqa: E402
from zerotrace_correlator import http_counters as c  # noqa: E402
from zerotrace_correlator.http_llm_step import HttpLlmCorrelator  # noqa: E402

pytestmark = pytest.mark.kernel

REPO = Path(__file__).resolve().parents[2]
CLIENTS, REQUESTS = 4, 150  # per wave
KINDS = (names.SPAN_KIND_HTTP_CLIENT, names.SPAN_KIND_HTTP_SERVER)

WORKLOAD = textwrap.dedent(
    """
    import http.client, json, sys, threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive
        def do_GET(self):
            body = b"ok " + self.path.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(json.dumps({"port": server.server_address[1]}), flush=True)
    sys.stdin.readline()

    def client(n):
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1])
        for i in range(%(requests)d):
            conn.request("GET", f"/c{n}/{i}")
            assert conn.getresponse().read() == f"ok /c{n}/{i}".encode()
        conn.close()

    for wave in range(2):
        threads = [
            threading.Thread(target=client, args=(wave * %(clients)d + n,))
            for n in range(%(clients)d)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(json.dumps({"wave_done": wave}), flush=True)
        sys.stdin.readline()
    """
) % {"requests": REQUESTS, "clients": CLIENTS}


def drain(feed: SocketFeed) -> list[RawRecord]:
    """Read until a poll brings nothing."""
    out: list[RawRecord] = []
    while batch := list(feed.poll(100)):
        out += batch
    return out


def observe(ringbuf_pages: int, read_wave_2: bool) -> tuple[list[dict[str, Any]], Any, Any]:
    """Run the workload's two waves under a socket probe; wave 1 is read as it comes, wave 2
    too or only after it ended. Returns the spans the correlator makes of the records, the
    feed's counters and the correlator's."""
    probe = SocketProbe(REPO / "bpf", ringbuf_pages=ringbuf_pages, tls=False, follow=True)
    feed = SocketFeed(probe, "test-node", 0)
    probe.attach()
    records: list[RawRecord] = []
    try:
        with subprocess.Popen(
            [sys.executable, "-c", WORKLOAD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        ) as app:
            assert app.stdin and app.stdout
            json.loads(app.stdout.readline())
            probe.follow_pid(app.pid)
            for wave, command in enumerate(("go", "next")):
                app.stdin.write(command + "\n")
                app.stdin.flush()
                with ThreadPoolExecutor(1) as pool:
                    done = pool.submit(app.stdout.readline)
                    while not done.done() and (wave == 0 or read_wave_2):
                        records += feed.poll(20)
                    assert json.loads(done.result()) == {"wave_done": wave}
                records += drain(feed)
            app.stdin.write("end\n")
            app.stdin.flush()
        counters = feed.counters()
    finally:
        probe.close()
    correlator = HttpLlmCorrelator()
    spans = []
    for record in records:
        if record.topic == names.RAW_CONN.name:
            out = correlator.feed_conn(record.datum)
            out += correlator.advance(record.datum["ts_ns"])
        else:
            out = []
            for call in socket_data_of(record.datum):
                out += correlator.feed_socket(call)
                out += correlator.advance(call["end_ns"])
        spans += [datum for schema, datum in out if schema == names.DERIVED_SPAN.record]
    spans += [datum for schema, datum in correlator.flush() if schema == names.DERIVED_SPAN.record]
    return spans, counters, correlator.counters


def sides(spans: list[dict[str, Any]]) -> dict[tuple[str, str], list[int]]:
    """Request indexes per connection side (client n, span kind), in time order."""
    by_side: dict[tuple[str, str], list[int]] = defaultdict(list)
    for span in sorted(spans, key=lambda s: s["start_ns"]):
        _, client, index = span["attributes"][names.ATTR_URL_PATH].split("/")
        by_side[(client, span["kind"])].append(int(index))
    return by_side


def test_polls_that_stop_at_their_byte_budget_lose_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A poll takes at most POLL_BYTES and leaves the rest for the next one; the event at the
    budget's edge is kept (libbpf has consumed it already). Made 2 KiB here, so that every
    poll stops at its edge many times over: every exchange of both waves is whole."""
    monkeypatch.setattr(socket_ring, "POLL_BYTES", 2048)
    spans, counters, correlated = observe(ringbuf_pages=4096, read_wave_2=True)
    assert (counters["lost"], counters["shed"]) == (0, 0), counters
    assert correlated[c.BYTES_LOST_BY_TCP_SEQ] == 0, correlated
    by_side = sides(spans)
    assert len(by_side) == 4 * CLIENTS
    assert all(indexes == list(range(REQUESTS)) for indexes in by_side.values())


def test_a_reader_far_behind_sheds_whole_connections_and_loses_nothing() -> None:
    spans, counters, correlated = observe(ringbuf_pages=64, read_wave_2=False)
    assert counters["lost"] == 0, counters
    assert counters["shed"] >= 1 and counters["shed_calls"] >= 1, counters
    assert spans, "nothing was recorded at all"
    assert all(span["status"] == "OK" for span in spans), [s for s in spans if s["status"] != "OK"]
    assert correlated[c.EXCHANGES_ABORTED] == 0, correlated
    assert correlated[c.PARSE_ERRORS] == 0, correlated
    # Each side of each connection: its first k requests, in order, every one of them whole.
    by_side = sides(spans)
    for side, indexes in by_side.items():
        assert indexes == list(range(len(indexes))), (side, indexes[:10])
    whole = [side for side, indexes in by_side.items() if len(indexes) == REQUESTS]
    cut = 4 * CLIENTS - len(whole)  # seen in part, or never: shed at birth
    assert cut >= 1 and len(whole) + cut == 4 * CLIENTS, (len(whole), cut)
    first_wave = {(f"c{n}", kind) for n in range(CLIENTS) for kind in KINDS}
    assert first_wave <= set(whole), sorted(set(by_side) - set(whole))
    assert correlated[c.CONNS_SHED] <= counters["shed"]
    print(  # the figures, for a person reading -s output
        f"shed {counters['shed']} connections ({counters['shed_calls']} calls); "
        f"{len(whole)} of {4 * CLIENTS} connection sides whole, {len(spans)} spans, "
        f"{correlated[c.EXCHANGES_SHED]} exchanges in progress dropped",
        file=sys.stderr,
    )
