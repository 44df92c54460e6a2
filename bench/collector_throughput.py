"""What the real collector does per core of its own CPU time, under a local HTTP load.

A small keep-alive HTTP/1.1 server (uvloop, one process) serves tiny responses and an SSE
stream endpoint; load generators in their own processes drive it (both in
bench/workloads/http_load.py) while `zerotrace collector` observes the server's port and
publishes raw.socket and raw.conn records to the real Kafka with acknowledgements. Two
phases, a fresh collector for each:

- steady: small GETs on many keep-alive connections at --rate requests/s (0: as fast as they
  go), plus SSE streams, for --seconds;
- burst: `ab -k -n 60000 -c 8` (apache2-utils), 60,000 requests as fast as 8 keep-alive
  connections go.

Each phase also prints what redaction (credentials and content masked before anything is
published) cost inside it: the socket feed's CPU time around it, per event and as a share.

Per phase: the collector's CPU time from "collector attached" (after the bcc compile) to its
exit (its last drain and Kafka flush included: /proc/PID/stat, then wait4's rusage), the
records it says it published, lost and shed, the records actually found in Kafka (read back
from the end offsets noted before it started to those after it exited), and the HTTP
exchanges in those records, whole or only in part, beside the requests the generators made
(the collector observes both ends of each). The collector is stopped once Kafka has stopped
growing: it has caught up with its ring, so what it has not published by then is lost.

Run (root): sudo .venv/bin/python -m bench.collector_throughput [--seconds 10 --rate 2000]
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bench.workloads import http_load
from bench.workloads.http_load import SSE_END, Load
from zerotrace import names
from zerotrace.socket_batch import socket_data_of

EVENTS_PER_CORE_TARGET = 100_000
REQUESTS_PER_CORE_TARGET = 50_000
DEEPFLOW_REQUESTS_PER_CORE = 90_000  # published figure for DeepFlow's Rust agent

# -- pure: what the collector and /proc print --------------------------------------------------


@dataclass
class CollectorReport:
    """The collector's end of run (zerotrace_cli.collector_cmd._publish): "published N
    records, P unacknowledged, F failed", then a line per feed from run_view.feed_lines
    ("socket: lost 0, shed 3, shed_calls 120, filtered 282": lost and shed always, the rest
    when not 0), a "collector: backpressure N" line when that is not 0, and its own cost."""

    published: int
    unacknowledged: int
    failed: int
    counters: dict[str, int]  # "<feed>.<name>", the collector's own without a prefix
    notes: list[str] = field(default_factory=list)  # other lines after it (own cost)
    events: int = 0  # raw events in the published records (a SocketBatch carries many)

    def __post_init__(self) -> None:
        if not self.events:
            self.events = self.published  # a report from before SocketBatch: one each

    def _sum(self, name: str) -> int:
        return sum(v for k, v in self.counters.items() if k.rpartition(".")[2] == name)

    @property
    def lost(self) -> int:
        """Events the kernel dropped (every feed's `lost`: ring full, state map full)."""
        return self._sum("lost")

    @property
    def shed(self) -> int:
        """Events left out on purpose (`shed_calls`: calls of shed connections)."""
        return self._sum("shed_calls")

    @property
    def shed_connections(self) -> int:
        """Connections shed whole (`shed`)."""
        return self._sum("shed")


_FEED_LINE = re.compile(r"([\w-]+): (\w+ \d+(?:, \w+ \d+)*)")  # "<feed>: <name> <count>, ..."


def parse_report(stderr: str) -> CollectorReport | None:
    lines = [line.removeprefix("zerotrace: ").strip() for line in stderr.splitlines()]
    at = [i for i, line in enumerate(lines) if re.match(r"published \d+ records", line)]
    if not at:
        return None
    head, rest = lines[at[-1]], lines[at[-1] + 1 :]

    def count(pattern: str) -> int:
        found = re.search(pattern.replace("N", r"(\d+)"), head)
        return int(found.group(1)) if found else 0

    counters: dict[str, int] = {}
    notes = []
    for line in rest:
        feed = _FEED_LINE.fullmatch(line)
        if feed is None:
            notes.append(line)
            continue
        prefix = "" if feed.group(1) == "collector" else feed.group(1) + "."
        for pair in feed.group(2).split(", "):
            name, _, value = pair.partition(" ")
            counters[prefix + name] = int(value)
    published = count("published N records")
    events = count(r"records \(N events\)")
    return CollectorReport(
        published, count("N unacknowledged"), count("N failed"), counters, notes, events
    )


def proc_cpu_seconds(stat: str, ticks_per_s: int) -> float:
    """utime + stime of /proc/PID/stat (fields 14 and 15; the name in parentheses may hold
    spaces, so fields are counted after its closing parenthesis)."""
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / ticks_per_s


# -- pure: exchanges in the records ------------------------------------------------------------

METHODS = (b"GET ", b"POST ", b"HEAD ", b"PUT ", b"DELETE ", b"OPTIONS ", b"PATCH ")


@dataclass
class _End:
    """One end of one connection: where each direction's bytes should go on (tcp_seq), and
    the exchange in progress: None, a request with no answer yet, or an answer (whole so far,
    and finished)."""

    next_seq: dict[str, int] = field(default_factory=dict)
    state: str | None = None  # None, "request" or "answer"
    intact: bool = True
    finished: bool = False


@dataclass
class RawExchanges:
    """HTTP exchanges in raw.socket records, for this bench's load: a request is one record
    (a small GET), its answer one record, or an SSE head, chunks and the last chunk. Requests
    and answers alternate on a connection (keep-alive, no pipelining), so each end pairs
    them in order. An exchange is whole when its request and all of its answer are there
    (no tcp_seq gap inside the answer), half when only a part is: a request without its
    answer, an answer without its request, or an answer with bytes missing. An exchange of
    which nothing came is neither: missing. The exchange in progress on a connection the
    collector shed (raw.conn SHED: nothing of it after that) is cut, not half: the correlator
    drops it (http.exchanges.shed), so no span is half an exchange."""

    whole: int = 0
    half: int = 0
    cut: int = 0
    _ends: dict[str, _End] = field(default_factory=dict)
    _shed: set[str] = field(default_factory=set)

    def shed(self, conn_id: str) -> None:
        """The collector shed this connection: its last exchange may be cut short."""
        self._shed.add(conn_id)

    def feed(self, record: Mapping[str, Any]) -> None:
        end = self._ends.setdefault(str(record["conn_id"]), _End())
        payload, direction, seq = bytes(record["payload"]), record["direction"], record["tcp_seq"]
        gap = seq is not None and end.next_seq.get(direction, seq) != seq
        if seq is not None:
            end.next_seq[direction] = seq + int(record["bytes"])
        if payload.startswith(METHODS):
            self._close(end)
            end.state = "request"
        elif payload.startswith(b"HTTP/1."):
            if end.state != "request":
                self._close(end)
                self.half += 1  # an answer whose request is not there
                end.state = None
                return
            end.state, end.intact = "answer", True
            end.finished = b"chunked" not in payload.split(b"\r\n\r\n", 1)[0].lower()
            end.finished = end.finished or payload.endswith(SSE_END)
        elif end.state == "answer":
            end.intact = end.intact and not gap
            end.finished = end.finished or payload.endswith(SSE_END)
        elif end.state == "request":  # the answer's head is not there
            end.state, end.intact, end.finished = "answer", False, payload.endswith(SSE_END)

    def finish(self) -> None:
        for conn_id, end in self._ends.items():
            complete = end.state == "answer" and end.intact and end.finished
            if conn_id in self._shed and end.state is not None and not complete:
                self.cut += 1
                end.state = None
            self._close(end)

    def _close(self, end: _End) -> None:
        if end.state == "request":
            self.half += 1
        elif end.state == "answer":
            if end.intact and end.finished:
                self.whole += 1
            else:
                self.half += 1
        end.state = None


# -- pure: figures, verdicts, table ------------------------------------------------------------


@dataclass
class Phase:
    name: str
    seconds: float  # wall time of the load
    requests: int  # HTTP requests the generators made and got answered (an SSE stream is one)
    ends: int  # ends of each exchange observed (2: client and server)
    report: CollectorReport
    cpu_s: float  # the collector's CPU time, attach to exit
    in_kafka: int  # raw events found in Kafka between the collector's start and exit
    whole: int  # exchanges recorded whole, all ends
    half: int  # exchanges recorded in part
    cut: int = 0  # exchanges in progress when their connection was shed (dropped downstream)

    @property
    def exchanges_made(self) -> int:
        return self.requests * self.ends

    @property
    def requests_seen(self) -> int:
        """Requests of which the collector published something (at either end): shed and
        lost ones cost it next to nothing, so they do not count towards its rate."""
        return (self.whole + self.half) // self.ends


def per_core(count: int, cpu_s: float) -> float:
    return count / cpu_s if cpu_s > 0 else float("inf")


def mark(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def dropped(r: CollectorReport) -> str:
    """Events lost in the kernel and shed on purpose, and their share of all events."""
    gone = r.lost + r.shed
    share = 100 * gone / (gone + r.events) if gone else 0.0
    return f"{r.lost:,}/{r.shed:,} ({share:.0f} %)"


def delivered(p: Phase) -> bool:
    """Nothing lost between the kernel and Kafka: no ring loss, nothing shed, every record
    acknowledged and found in Kafka."""
    r = p.report
    clean = r.lost == 0 and not r.shed and r.unacknowledged == 0 and r.failed == 0
    return clean and p.in_kafka >= r.events


def rate_verdicts(p: Phase) -> list[str]:
    events = per_core(p.report.events, p.cpu_s)
    requests = per_core(p.requests_seen, p.cpu_s)
    gone = f"lost/shed {dropped(p.report)}"
    return [
        f"{p.name}: events/s per collector core {events:,.0f}, {gone} (target >= "
        f"{EVENTS_PER_CORE_TARGET:,} with 0 lost): "
        f"{mark(events >= EVENTS_PER_CORE_TARGET and delivered(p))}",
        f"{p.name}: HTTP requests/s per collector core {requests:,.0f}, {gone} (target >= "
        f"{REQUESTS_PER_CORE_TARGET:,} with 0 lost; DeepFlow's agent: about "
        f"{DEEPFLOW_REQUESTS_PER_CORE:,}): "
        f"{mark(requests >= REQUESTS_PER_CORE_TARGET and delivered(p))}",
    ]


def redaction_line(p: Phase) -> str:
    """What masking credentials and content cost inside the collector: the socket feed's CPU
    time around each record's redaction (its `redact_cpu_us` counter), per event and as a
    share of the collector's CPU time."""
    redact_s = p.report._sum("redact_cpu_us") / 1e6
    per_event = 1e6 * redact_s / p.report.events if p.report.events else 0.0
    share = 100 * redact_s / p.cpu_s if p.cpu_s > 0 else 0.0
    return (
        f"{p.name}: redaction {redact_s:.2f} s of the collector's {p.cpu_s:.2f} s CPU "
        f"({share:.1f} %), {per_event:.1f} us per event"
    )


def exchange_verdict(p: Phase) -> str:
    """Every exchange recorded, or what was shed counted by whole connection: never half.
    An exchange a shed cut short is not half (the correlator drops it), but counted."""
    missing = max(0, p.exchanges_made - p.whole - p.half - p.cut)
    shed = p.report.shed_connections
    ok = p.half == 0 and (p.whole >= p.exchanges_made or shed > 0)
    return (
        f"{p.name}: exchanges recorded whole {p.whole:,} of {p.exchanges_made:,} "
        f"({p.requests:,} requests x {p.ends} ends), in part {p.half:,}, cut by a shed "
        f"{p.cut:,}, missing {missing:,}; connections shed: {shed:,} (target: all whole, or "
        f"shed by whole connection, none in part): {mark(ok)}"
    )


def report_lines(phases: list[Phase]) -> list[str]:
    """The table, each phase's collector lines, then the verdicts."""
    out = table(phases)
    for p in phases:
        counts = ", ".join(f"{k} {v:,}" for k, v in p.report.counters.items())
        out.append(f"{p.name} collector: {counts or 'no counters'}")
        out += [f"{p.name} collector: {note}" for note in p.report.notes]
    out += rate_verdicts(phases[0])
    out += [redaction_line(p) for p in phases]
    out += [exchange_verdict(p) for p in phases]
    return out


TABLE_HEAD = (
    "phase|load s|requests|events out|in Kafka|lost/shed|CPU s|events/s/core|seen req/s/core|"
)
TABLE_HEAD += "exchanges whole/part/made"


def table(phases: list[Phase]) -> list[str]:
    rows = [TABLE_HEAD.split("|")] + [
        [
            p.name,
            f"{p.seconds:.1f}",
            f"{p.requests:,}",
            f"{p.report.events:,}",
            f"{p.in_kafka:,}",
            dropped(p.report),
            f"{p.cpu_s:.2f}",
            f"{per_core(p.report.events, p.cpu_s):,.0f}",
            f"{per_core(p.requests_seen, p.cpu_s):,.0f}",
            f"{p.whole:,}/{p.half:,}/{p.exchanges_made:,}",
        ]
        for p in phases
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


# -- the collector and Kafka ---------------------------------------------------------------------


class CollectorRun:
    """`zerotrace collector` on the server's port; CPU time counted from its attach."""

    def __init__(self, port: int, cpu_budget: str | None) -> None:
        cmd = [sys.executable, "-m", "zerotrace_cli", "collector", "--port", str(port)]
        env = dict(os.environ)
        if cpu_budget is not None:  # the setting, not the option: older collectors ignore it
            env["ZEROTRACE_CPU_BUDGET"] = cpu_budget
        self.proc = subprocess.Popen(
            [*cmd, "--no-files"], stderr=subprocess.PIPE, text=True, env=env
        )
        self.lines: list[str] = []
        attached = threading.Event()

        def read() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.lines.append(line)
                if "collector attached" in line:
                    attached.set()

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        while not attached.wait(0.2):
            if self.proc.poll() is not None:
                self.reader.join(5)
                raise SystemExit("the collector did not start:\n" + "".join(self.lines))
        with open(f"/proc/{self.proc.pid}/stat") as f:
            self.cpu_at_attach = proc_cpu_seconds(f.read(), os.sysconf("SC_CLK_TCK"))

    def stop(self) -> tuple[CollectorReport, float]:
        """SIGINT, then its report and its CPU seconds since attach (wait4: all threads)."""
        self.proc.send_signal(signal.SIGINT)
        _, status, usage = os.wait4(self.proc.pid, 0)
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.reader.join(5)
        text = "".join(self.lines)
        report = parse_report(text)
        if report is None:
            raise SystemExit(f"no report from the collector (exit {self.proc.returncode}):\n{text}")
        return report, usage.ru_utime + usage.ru_stime - self.cpu_at_attach


Offsets = dict[tuple[str, int], int]


class KafkaRecords:
    """raw.socket and raw.conn between two moments: end offsets noted, then read back."""

    TOPICS = (names.RAW_SOCKET.name, names.RAW_CONN.name)

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Consumer

        from zerotrace_cli.kafka_wiring import kafka_codec

        self.codec = kafka_codec(bootstrap)
        group = f"bench-collector-throughput-{os.getpid()}"
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
        self.consumer = Consumer(conf)

    def ends(self) -> Offsets:
        from confluent_kafka import TopicPartition

        out = {}
        for topic in self.TOPICS:
            for p in self.consumer.list_topics(topic, timeout=10).topics[topic].partitions:
                high = self.consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
                out[(topic, p)] = int(high)
        return out

    def read(self, start: Offsets, end: Offsets) -> Iterable[tuple[str, dict[str, Any]]]:
        """(topic, datum) of every raw event in [start, end), each partition in order: a
        SocketBatch record as the SocketData records of its calls."""
        from confluent_kafka import TopicPartition

        todo = {k: v for k, v in end.items() if v > start.get(k, 0)}
        self.consumer.assign([TopicPartition(t, p, start.get((t, p), 0)) for t, p in todo])
        quiet_since = time.monotonic()
        while todo and time.monotonic() - quiet_since < 30:
            for msg in self.consumer.consume(10_000, 1.0):
                key, offset, value = (msg.topic(), msg.partition()), msg.offset(), msg.value()
                if msg.error() or key not in todo or offset is None or value is None:
                    continue
                if offset < todo[key]:
                    quiet_since = time.monotonic()
                    record, datum = self.codec.decode(value)
                    if record == names.SOCKET_BATCH_RECORD:
                        for call in socket_data_of(datum):
                            yield str(key[0]), call
                    else:
                        yield str(key[0]), datum
                if offset >= todo[key] - 1:
                    del todo[key]
        self.consumer.unassign()


# -- one phase, and the whole run ------------------------------------------------------------------


def wait_quiet(kafka: KafkaRecords, quiet_s: float, limit_s: float) -> None:
    """Until the raw topics stop growing for quiet_s: the collector has caught up with the
    ring. It is stopped only then, since at its stop it drains its rings for 10 s at most."""
    last, since, deadline = -1, time.monotonic(), time.monotonic() + limit_s
    while time.monotonic() < deadline:
        now = sum(kafka.ends().values())
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
        time.sleep(0.25)


def run_phase(
    name: str, args: argparse.Namespace, served: tuple[int, int], load: Callable[[], Load]
) -> Phase:
    """*served*: the server's port and pid."""
    (port, server), kafka = served, args.kafka
    start = kafka.ends()
    collector = CollectorRun(port, args.cpu_budget)
    began = time.monotonic()
    requests, pids = load()
    seconds = time.monotonic() - began
    wait_quiet(kafka, args.quiet_s, limit_s=300)
    report, cpu_s = collector.stop()
    exchanges, found, ours, read_from = RawExchanges(), 0, 0, time.monotonic()
    for topic, datum in kafka.read(start, kafka.ends()):
        found += 1
        if datum["pid"] in pids or datum["pid"] == server:  # not another process's
            ours += 1
            if topic == names.RAW_SOCKET.name:
                exchanges.feed(datum)
            elif datum["kind"] == "SHED":
                exchanges.shed(str(datum["conn_id"]))
    exchanges.finish()
    took = time.monotonic() - read_from
    print(f"{name}: read back {found:,} events from Kafka in {took:.1f} s, {ours:,} of the load")
    return Phase(
        name, seconds, requests, 2, report, cpu_s, found, exchanges.whole, exchanges.half,
        exchanges.cut,
    )  # fmt: skip


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("--seconds", type=float, default=10, help="steady load (default 10)")
    add("--connections", type=int, default=32, help="keep-alive connections (default 32)")
    add("--rate", type=float, default=2000, help="small requests/s (default 2000; 0: flat out)")
    add("--streams", type=int, default=4, help="SSE streams at once (default 4)")
    add("--events", type=int, default=200, help="events per SSE stream (default 200)")
    add("--gap-ms", type=float, default=2, help="between SSE events (default 2)")
    add("--burst", type=int, default=60_000, help="ab requests (default 60000)")
    add("--no-burst", action="store_true", help="the steady phase only")
    add("--cpu-budget", help="the collector's CPU budget in cores (default: its own)")
    add("--quiet-s", type=float, default=2.0, help="Kafka still this long: caught up")
    return parser


def main() -> None:
    args = arguments().parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (the collector loads eBPF): run it with sudo")
    burst = not args.no_burst and http_load.ensure_ab()
    if not args.no_burst and not burst:
        print(http_load.INSTALL_AB)

    from zerotrace import settings

    args.kafka = KafkaRecords(settings.load(settings.CommonSettings).kafka)
    with http_load.served() as served:
        port = served[0]
        steady = functools.partial(
            http_load.steady,
            port,
            args.seconds,
            connections=args.connections,
            rate=args.rate,
            streams=args.streams,
            events=args.events,
            gap_ms=args.gap_ms,
        )
        phases = [run_phase("steady", args, served, steady)]
        if burst:
            ab = functools.partial(http_load.burst, port, args.burst)
            phases.append(run_phase("burst", args, served, ab))
    print("\n".join(report_lines(phases)))


if __name__ == "__main__":
    main()
