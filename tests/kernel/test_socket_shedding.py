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
import time
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

SERVER = textwrap.dedent(
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

    def client(n, requests=%(requests)d, path="/c"):
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1])
        for i in range(requests):
            conn.request("GET", f"{path}{n}/{i}")
            assert conn.getresponse().read() == f"ok {path}{n}/{i}".encode()
        conn.close()

    def run_wave(wave, work):
        threads = [threading.Thread(target=fn, args=args) for fn, args in work]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(json.dumps({"wave_done": wave}), flush=True)
        sys.stdin.readline()
    """
) % {"requests": REQUESTS}
WORKLOAD = SERVER + textwrap.dedent(
    """
    for wave in range(2):
        run_wave(wave, [(client, (wave * %(clients)d + n,)) for n in range(%(clients)d)])
    """
) % {"clients": CLIENTS}
# One keep-alive connection (paths /k0/i) making requests in three waves; the second also has
# CLIENTS clients of their own connections, enough to overflow a small unread ring.
KEEPER = SERVER + textwrap.dedent(
    """
    keeper = http.client.HTTPConnection("127.0.0.1", server.server_address[1])
    made = 0
    def keep(count):
        global made
        for _ in range(count):
            keeper.request("GET", f"/k0/{made}")
            assert keeper.getresponse().read() == f"ok /k0/{made}".encode()
            made += 1

    for wave, (kept, clients) in enumerate(((20, 0), (%(busy)d, %(clients)d), (20, 0))):
        run_wave(wave, [(client, (n,)) for n in range(clients)] + [(keep, (kept,))])
    """
) % {"clients": CLIENTS, "busy": 2 * REQUESTS}


def drain(feed: SocketFeed) -> list[RawRecord]:
    """Read until a poll brings nothing."""
    out: list[RawRecord] = []
    while batch := list(feed.poll(100)):
        out += batch
    return out


def run_waves(
    script: str, ringbuf_pages: int, read: tuple[bool, ...], resume_after_s: float = 10.0
) -> tuple[list[RawRecord], dict[str, int]]:
    """Run a workload's waves under a socket probe: wave i is read as it comes when read[i],
    else only after it ended; before a wave that follows an unread one, the reader waits
    *resume_after_s* (the probe's, so shed connections may be taken up again). Returns the
    records and the feed's counters."""
    probe = SocketProbe(
        REPO / "bpf",
        ringbuf_pages=ringbuf_pages,
        tls=False,
        follow=True,
        resume_after_s=resume_after_s,
    )
    feed = SocketFeed(probe, "test-node", 0)
    probe.attach()
    records: list[RawRecord] = []
    try:
        with subprocess.Popen(
            [sys.executable, "-c", script],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        ) as app:
            assert app.stdin and app.stdout
            json.loads(app.stdout.readline())
            probe.follow_pid(app.pid)
            for wave, read_it in enumerate(read):
                if wave and not read[wave - 1]:
                    time.sleep(resume_after_s)
                app.stdin.write("go\n")
                app.stdin.flush()
                with ThreadPoolExecutor(1) as pool:
                    done = pool.submit(app.stdout.readline)
                    while not done.done() and read_it:
                        records += feed.poll(20)
                    assert json.loads(done.result()) == {"wave_done": wave}
                records += drain(feed)
            app.stdin.write("end\n")
            app.stdin.flush()
        counters = feed.counters()
    finally:
        probe.close()
    return records, counters


def correlate(records: list[RawRecord]) -> tuple[list[dict[str, Any]], Any]:
    """The spans the correlator makes of the records, and its counters."""
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
    return spans, correlator.counters


def observe(ringbuf_pages: int, read_wave_2: bool) -> tuple[list[dict[str, Any]], Any, Any]:
    """The two-wave workload; wave 1 is read as it comes, wave 2 too or only after it ended.
    Returns the spans, the feed's counters and the correlator's."""
    records, counters = run_waves(WORKLOAD, ringbuf_pages, (True, read_wave_2))
    spans, correlated = correlate(records)
    return spans, counters, correlated


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


def test_a_shed_connection_is_taken_up_again_once_the_reader_has_caught_up() -> None:
    """A keep-alive connection shed while nobody read the ring (a burst beyond the budget) is
    seen again after the reader caught up and the mark aged past the correlator's grace: its
    requests of the third wave are whole spans, and nothing of it is reported in part."""
    records, counters = run_waves(KEEPER, 64, (True, False, True), resume_after_s=6.0)
    spans, correlated = correlate(records)
    assert counters["lost"] == 0, counters
    assert counters["shed"] >= 1 and counters["resumed"] >= 1, counters
    assert all(span["status"] == "OK" for span in spans), [s for s in spans if s["status"] != "OK"]
    assert correlated[c.EXCHANGES_ABORTED] == 0 and correlated[c.PARSE_ERRORS] == 0, correlated
    keeper = {kind: ix for (who, kind), ix in sides(spans).items() if who == "k0"}
    assert set(keeper) == set(KINDS), sorted(sides(spans))
    last_wave = list(range(20 + 2 * REQUESTS, 40 + 2 * REQUESTS))
    for kind, indexes in keeper.items():
        assert indexes[:20] == list(range(20)), (kind, indexes[:25])  # before the burst: whole
        after = [i for i in indexes if i >= last_wave[0]]
        # Seen again from the first call made after the reader caught up: the client's first
        # request; the server's read of it had begun while shed (a blocking read waiting
        # since the burst), so its side starts at the next request.
        first = 0 if kind == names.SPAN_KIND_HTTP_CLIENT else 1
        assert after == last_wave[first:], (kind, indexes[-25:])
