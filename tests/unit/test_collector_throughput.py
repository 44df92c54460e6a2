"""The pure parts of bench/collector_throughput.py and bench/workloads/http_load.py: what the
bench reads from the collector, /proc and ab, how it counts exchanges in raw records, its
figures, verdicts and table, the load's wire bytes and the generators' command lines. No root,
no Kafka, no eBPF."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Any

import pytest

from bench import collector_throughput as ct
from bench.workloads import http_load as load
from zerotrace_cli.run_view import feed_lines

pytestmark = pytest.mark.unit

REPORT = """\
zerotrace: CPU budget 0.5 core (cgroup v1 cpu.cfs_quota_us, /sys/fs/cgroup/cpu/zerotrace-1)
zerotrace: collector attached (socket); publishing to 127.0.0.1:9092
zerotrace: status: 5.0 s CPU over 11.6 s (0.43 core), RSS 170 MiB (peak 170 MiB); \
events published 3,451/s; socket: lost 0, shed 0
zerotrace: published 40150 records (120450 events), 0 unacknowledged, 0 failed
zerotrace: socket: lost 3, shed 2, shed_calls 1234, filtered 7573
zerotrace: collector: backpressure 4
zerotrace: own cost: 5.2 s CPU over 17.3 s (0.30 core), RSS 175 MiB (peak 180 MiB); \
events published 2,317/s
"""


def test_the_report_is_read_from_its_lines_after_the_published_one() -> None:
    report = ct.parse_report(REPORT)
    assert report is not None
    assert (report.published, report.unacknowledged, report.failed) == (40150, 0, 0)
    assert report.events == 120450  # SocketBatch records carry several events each
    assert report.counters == {
        "socket.lost": 3,
        "socket.shed": 2,
        "socket.shed_calls": 1234,
        "socket.filtered": 7573,
        "backpressure": 4,
    }
    assert (report.lost, report.shed, report.shed_connections) == (3, 1234, 2)
    assert report.notes == [REPORT.splitlines()[-1].removeprefix("zerotrace: ")]
    assert ct.parse_report("zerotrace: collector attached\n") is None


def test_the_report_reads_back_the_collectors_own_feed_lines() -> None:
    """The feed lines as the collector writes them (run_view.feed_lines over counters shaped
    as Collector.counters()), every feed summed, a spooled remainder beside the head."""
    counters = {
        "published": 9,
        "backpressure": 0,
        "socket.lost": 4,
        "socket.shed": 1,
        "socket.shed_calls": 60,
        "socket.malformed": 0,
        "socket.truncated": 12,
        "file-open.malformed": 0,
        "file-open.lost": 2,
    }
    head = "published 9 records, 3 unacknowledged (3 on disk in /s: sent next run), 1 failed"
    text = "\n".join(f"zerotrace: {line}" for line in [head, *feed_lines(counters), "own cost: x"])
    report = ct.parse_report(text)
    assert report is not None
    assert (report.published, report.unacknowledged, report.failed) == (9, 3, 1)
    assert report.counters == {
        "socket.lost": 4,
        "socket.shed": 1,
        "socket.shed_calls": 60,
        "socket.truncated": 12,
        "file-open.lost": 2,
        "file-open.shed": 0,  # shown at 0 for every feed
    }
    assert (report.lost, report.shed, report.shed_connections) == (6, 60, 1)
    assert report.notes == ["own cost: x"]


def test_cpu_seconds_from_proc_stat_even_when_the_name_holds_spaces_and_parens() -> None:
    fields = ["S"] + ["0"] * 10 + ["250", "150"] + ["0"] * 30  # utime, stime: fields 14, 15
    stat = "4242 (my (odd) name) " + " ".join(fields)
    assert ct.proc_cpu_seconds(stat, 100) == pytest.approx(4.0)


def test_ab_counts() -> None:
    text = (
        "Complete requests:      60000\nFailed requests:        3\n"
        "Keep-Alive requests:    59990\nTotal transferred:      5460000 bytes\n"
    )
    assert load.parse_ab(text) == {
        "complete": 60000,
        "failed": 3,
        "keepalive": 59990,
        "non_2xx": 0,
    }


def record(conn: str, direction: str, payload: bytes, seq: int | None) -> dict[str, Any]:
    return {
        "conn_id": conn,
        "direction": direction,
        "payload": payload,
        "bytes": len(payload),
        "tcp_seq": seq,
    }


class Wire:
    """One end of a connection writing records with running sequence numbers."""

    def __init__(self, conn: str, server: bool = True) -> None:
        self.conn = conn
        self.request_dir, self.answer_dir = (
            ("INGRESS", "EGRESS") if server else ("EGRESS", "INGRESS")
        )
        self.seq = {"INGRESS": 1000, "EGRESS": 5000}

    def send(self, direction: str, payload: bytes, keep: bool = True) -> list[dict[str, Any]]:
        out = [record(self.conn, direction, payload, self.seq[direction])] if keep else []
        self.seq[direction] += len(payload)
        return out

    def small(self, keep_request: bool = True, keep_answer: bool = True) -> list[dict[str, Any]]:
        return self.send(self.request_dir, load.REQUEST, keep_request) + self.send(
            self.answer_dir, load.RESPONSE, keep_answer
        )

    def stream(self, events: int, drop: int | None = None) -> list[dict[str, Any]]:
        out = self.send(self.request_dir, b"GET /stream?events=3&gap_ms=1 HTTP/1.1\r\n\r\n")
        out += self.send(self.answer_dir, load.SSE_HEAD)
        for i in range(events):
            out += self.send(self.answer_dir, load.sse_event(i), keep=i != drop)
        return out + self.send(self.answer_dir, load.SSE_END)


def tally(records: list[dict[str, Any]]) -> tuple[int, int]:
    exchanges = ct.RawExchanges()
    for r in records:
        exchanges.feed(r)
    exchanges.finish()
    return exchanges.whole, exchanges.half


def test_whole_exchanges_small_and_streamed_on_both_ends() -> None:
    server, client = Wire("s"), Wire("c", server=False)
    records = server.small() + server.stream(5) + server.small()
    records += client.small() + client.stream(3)
    assert tally(records) == (5, 0)


def test_an_exchange_gone_whole_is_missing_not_half() -> None:
    server = Wire("s")
    records = server.small() + server.small(False, False) + server.small()
    assert tally(records) == (2, 0)


def test_half_exchanges_a_request_alone_an_answer_alone_a_stream_with_a_hole() -> None:
    server = Wire("s")
    assert tally(server.small(keep_answer=False) + server.small()) == (1, 1)
    server = Wire("s")
    assert tally(server.small(keep_request=False) + server.small()) == (1, 1)
    server = Wire("s")
    assert tally(server.stream(5, drop=2) + server.small()) == (1, 1)
    server = Wire("s")  # the last thing seen: a request never answered
    assert tally(server.small() + server.send("INGRESS", load.REQUEST)) == (1, 1)


def test_the_exchange_a_shed_cut_is_counted_cut_not_half() -> None:
    server, client = Wire("s"), Wire("c", server=False)
    cut_request = server.small()[:1]  # the request read, then the connection was shed
    cut_stream = client.stream(4)[:4]  # the head and two events, then shed
    exchanges = ct.RawExchanges()
    for record in server.small() + cut_request + client.small() + cut_stream:
        exchanges.feed(record)
    exchanges.shed(str(cut_request[0]["conn_id"]))
    exchanges.shed(str(cut_stream[0]["conn_id"]))
    exchanges.finish()
    assert (exchanges.whole, exchanges.half, exchanges.cut) == (2, 0, 2)
    shed = ct.CollectorReport(100, 0, 0, {"socket.shed": 2})
    verdict = ct.exchange_verdict(phase(whole=2, cut=2, requests=3, report=shed))
    assert "in part 0, cut by a shed 2, missing 2;" in verdict and verdict.endswith("PASS")


def test_a_stream_whose_head_is_missing_is_half() -> None:
    server = Wire("s")
    records = server.stream(3)
    del records[1]  # the SSE head
    assert tally(records) == (0, 1)


def phase(**kw: Any) -> ct.Phase:
    report = kw.pop("report", ct.CollectorReport(200_000, 0, 0, {"socket.lost": 0}))
    values: dict[str, Any] = {
        "name": "steady",
        "seconds": 10.0,
        "requests": 50_000,
        "ends": 2,
        "report": report,
        "cpu_s": 2.0,
        "in_kafka": 200_000,
        "whole": 100_000,
        "half": 0,
    }
    values.update(kw)
    return ct.Phase(**values)


def test_rates_per_core_pass_only_with_nothing_lost() -> None:
    p = phase()
    assert ct.per_core(200_000, 2.0) == 100_000
    assert ct.per_core(1, 0.0) == float("inf")
    events, requests = ct.rate_verdicts(p)
    assert "100,000" in events and events.endswith("PASS")
    assert "25,000" in requests and requests.endswith("MISS")  # 50,000 requests / 2 s
    half_seen = phase(whole=40_000, half=10_000)  # the rest shed: seen at neither end
    assert half_seen.requests_seen == 25_000
    assert "12,500" in ct.rate_verdicts(half_seen)[1]
    lossy = phase(report=ct.CollectorReport(200_000, 0, 0, {"socket.lost": 1}))
    assert ct.rate_verdicts(lossy)[0].endswith("MISS")
    unchecked = phase(in_kafka=199_999)  # Kafka holds less than the collector says
    assert ct.rate_verdicts(unchecked)[0].endswith("MISS")
    shed = phase(report=ct.CollectorReport(200_000, 0, 0, {"socket.shed_calls": 5}))
    assert ct.rate_verdicts(shed)[0].endswith("MISS")


def test_dropped_is_lost_and_shed_and_their_share() -> None:
    counters = {"socket.lost": 30, "socket.shed": 1, "socket.shed_calls": 70}
    assert ct.dropped(ct.CollectorReport(100, 0, 0, counters)) == "30/70 (50 %)"
    assert ct.dropped(ct.CollectorReport(100, 0, 0, {})) == "0/0 (0 %)"


def test_the_exchange_verdict() -> None:
    assert ct.exchange_verdict(phase()).endswith("PASS")
    assert ct.exchange_verdict(phase(half=1, whole=99_999)).endswith("MISS")
    short = phase(whole=90_000)  # missing 10,000 and nothing says they were shed
    assert "missing 10,000" in ct.exchange_verdict(short)
    assert "connections shed: 0 " in ct.exchange_verdict(short)
    assert ct.exchange_verdict(short).endswith("MISS")
    shed = ct.CollectorReport(180_000, 0, 0, {"socket.shed": 3, "socket.shed_calls": 20_000})
    assert ct.exchange_verdict(phase(whole=90_000, report=shed)).endswith("PASS")


def test_the_redaction_line_is_the_feeds_redaction_cpu_per_event_and_share() -> None:
    report = ct.CollectorReport(200_000, 0, 0, {"socket.redact_cpu_us": 500_000})
    assert ct.redaction_line(phase(report=report)) == (
        "steady: redaction 0.50 s of the collector's 2.00 s CPU (25.0 %), 2.5 us per event"
    )
    assert "(0.0 %), 0.0 us per event" in ct.redaction_line(phase())


def test_table_and_report_lines() -> None:
    burst = phase(name="burst", whole=99_000, half=10)
    lines = ct.report_lines([phase(), burst])
    head, steady, second = lines[:3]
    assert head.split()[:3] == ["phase", "load", "s"]
    assert steady.split()[:5] == ["steady", "10.0", "50,000", "200,000", "200,000"]
    assert "99,000/10/100,000" in second
    assert head.index("CPU s") == steady.index("2.00")  # columns line up
    assert "steady collector: socket.lost 0" in lines
    verdicts = [line for line in lines if line.endswith(("PASS", "MISS"))]
    assert len(verdicts) == 4  # two rates (steady), an exchange verdict per phase
    assert sum(" redaction " in line for line in lines) == 2  # one per phase


def test_the_wire_bytes() -> None:
    heads, rest = load.split_requests(load.REQUEST * 2 + b"GET /x HT")
    assert heads == [load.REQUEST[:-4]] * 2 and rest == b"GET /x HT"
    assert load.stream_params(b"GET /stream?events=7&gap_ms=0.5 HTTP/1.1") == (7, 0.0005)
    assert load.stream_params(b"GET /small HTTP/1.1") is None
    assert load.take_response(load.RESPONSE + b"HTTP/1.1") == (True, b"HTTP/1.1")
    assert load.take_response(load.RESPONSE[:-1]) == (False, load.RESPONSE[:-1])
    chunk = load.sse_event(12)
    size, _, body = chunk.partition(b"\r\n")
    assert int(size, 16) == len(body) - 2 and body.endswith(b"\n\n\r\n")
    assert not (chunk + load.SSE_HEAD).endswith(load.SSE_END)


class FakeGenerator:
    """A generator process that answers at once: its command line kept, N requests made."""

    started: list[list[str]] = []

    def __init__(self, argv: list[str], stdout: int) -> None:
        self.argv, self.pid, self.returncode = argv, 100 + len(self.started), 0
        self.started.append(argv)

    def communicate(self) -> tuple[bytes, None]:
        made = 7 if "small" in self.argv else 2
        return b"some noise\n" + b'{"requests": %d}\n' % made, None


def test_the_steady_load_starts_both_generators_with_what_they_need(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    FakeGenerator.started = []
    monkeypatch.setattr(subprocess, "Popen", FakeGenerator)
    made = load.steady(4242, 5.0, connections=3, rate=0.0, streams=2, events=9, gap_ms=1.5)
    assert made == (9, {100, 101})
    small, sse = (load.arguments().parse_args(argv[3:]) for argv in FakeGenerator.started)
    assert FakeGenerator.started[0][:3] == [sys.executable, "-m", "bench.workloads.http_load"]
    assert vars(small) == {
        "role": "small",
        "port": 4242,
        "seconds": 5.0,
        "connections": 3,
        "rate": 0.0,
    }
    assert vars(sse) == {
        "role": "sse",
        "port": 4242,
        "seconds": 5.0,
        "streams": 2,
        "events": 9,
        "gap_ms": 1.5,
    }


def test_the_bench_wants_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(sys, "argv", ["collector_throughput", "--no-burst"])
    with pytest.raises(SystemExit, match="needs root"):
        ct.main()


def test_ab_is_installed_only_when_missing_and_as_root(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[list[str]] = []

    def run(cmd: list[str], **_: object) -> subprocess.CompletedProcess[bytes]:
        ran.append(cmd)
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/ab")
    assert load.ensure_ab(run) and ran == []
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert not load.ensure_ab(run) and ran == []
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert not load.ensure_ab(run)  # still missing after the install: no burst
    assert ran == [["apt-get", "install", "-y", "-q", "apache2-utils"]]
