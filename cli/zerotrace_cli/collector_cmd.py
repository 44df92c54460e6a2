"""`zerotrace collector`: the probes of this node publishing to Kafka (the distributed mode),
with a disk spool while Kafka is away."""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zerotrace import settings
from zerotrace.clock import SystemClock
from zerotrace.codec import AvroCodec
from zerotrace.run_marker import RunMarker
from zerotrace.self_cost import CostSnapshot, SelfCost, cost_line, per_second
from zerotrace_cli.budget_args import add_budget_argument, hold_budget
from zerotrace_cli.common import StopFlag, say
from zerotrace_cli.kafka_wiring import kafka_bus, kafka_codec
from zerotrace_cli.node_feeds import add_node_arguments
from zerotrace_cli.run_view import feed_lines

if TYPE_CHECKING:
    from zerotrace.cpu_budget import CpuBudget
    from zerotrace.spooling_producer import SpoolingProducer
    from zerotrace_cli.node_feeds import NodeFeeds
    from zerotrace_collector.collector import Collector


DRAIN_LIMIT_S = 10.0  # at the end, at most this long reading what the rings still hold


def register(sub: Any) -> None:
    p = sub.add_parser(
        "collector",
        help="attach probes on this node and publish to Kafka",
        description="File opens, and TCP traffic (syscalls and TLS plaintext) of the processes "
        "named by --pid (and their children), --process or --cgroup, or of the ports named by "
        "--port. Socket capture needs one of them here: unfiltered, it would capture Kafka's "
        "own traffic, which carries what it captures.",
    )
    add_node_arguments(p)
    add_budget_argument(p)
    p.add_argument("--no-sockets", action="store_true", help="do not capture TCP traffic")
    p.add_argument("--duration", type=float, default=0, help="stop after this many seconds")
    p.add_argument(
        "--spool-mb",
        type=int,
        default=1024,
        help="while Kafka is away, keep up to this many MiB of records on disk under "
        "$ZEROTRACE_HOME/spool and send them, in order, when it is back; past it records are "
        "counted lost (default 1024)",
    )
    p.add_argument(
        "--status-every",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="a status line on stderr this often: zerotrace's own CPU and RSS, records "
        "published per second and each feed's losses (default 10; 0 = none)",
    )
    p.add_argument("--ebpf", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(handler=collector)


def collector(args: argparse.Namespace) -> int:
    from zerotrace_cli.node_feeds import NO_SOCKET_FILTER, node_feeds
    from zerotrace_collector.collector import monotonic_to_epoch_offset_ns, require_root

    common = settings.load(settings.CommonSettings)
    filtered = bool(args.pid or args.port or args.process or args.cgroup)
    offset = monotonic_to_epoch_offset_ns()
    sockets = filtered and not args.no_sockets
    feeds = node_feeds(
        args,
        common.node_id,
        offset,
        follows=bool(args.pid),
        sockets=sockets,
        file_rw=common.file_rw,
        service_names=common.service_names,
    )
    if args.ebpf:
        print("\n".join(feeds.programs()))
        return 0
    require_root()
    if not filtered and not args.no_sockets:
        say(NO_SOCKET_FILTER)
    budget = hold_budget(args, common)
    try:  # released however it ends: Kafka away, an attach that fails, the loop's end
        return _attach_and_publish(args, common, feeds, budget)
    finally:
        budget.release()


def _attach_and_publish(
    args: argparse.Namespace, common: settings.CommonSettings, feeds: NodeFeeds, budget: CpuBudget
) -> int:
    bus = kafka_bus(common)
    producer = _collector_producer(bus, common, args.spool_mb)
    for note in feeds.attach():
        say(note)
    if args.pid:
        feeds.follow(args.pid)
    say(f"collector attached ({feeds.names}); publishing to {common.kafka}")
    codec = kafka_codec(common)
    return _publish(
        feeds,
        producer,
        codec,
        args.duration,
        status_every=args.status_every,
        budget=budget,
        slice_us=common.cpu_slice_us,
    )


def _publish(
    feeds: NodeFeeds,
    producer: SpoolingProducer,
    codec: AvroCodec,
    duration: float,
    *,
    status_every: float = 0,
    budget: CpuBudget | None = None,
    slice_us: int = 0,
) -> int:
    """The collector's loop until SIGTERM/Ctrl-C or the duration, with a status line every
    *status_every* seconds (0: none), then its report: what was published, each feed's
    losses, and what zerotrace itself cost. slice_us: its work between pauses on a busy node
    (zerotrace.cpu_slices; 0: none)."""
    from zerotrace_collector.collector import Collector

    slices = feeds.paced(slice_us)
    col = Collector(feeds.feeds, producer, codec, slices=slices)
    marker = RunMarker(Path(producer.spool_folder), time.time)  # a kill leaves it: a gap said
    spool = _SpoolWatch(producer)
    stop = StopFlag()
    status = _Status(col, SelfCost(time.monotonic), budget, status_every)
    started = time.monotonic()
    try:
        while not stop:
            if col.pump(100) == 0:
                producer.tick()  # idle: the spool still goes on, an outage is still seen
            if budget is not None:
                budget.steer(feeds.behind, time.monotonic())
                slices.steer(budget.keeping_up)
            status.tick()
            marker.beat()
            spool.tick()
            if duration and time.monotonic() - started >= duration:
                break
    finally:
        # What the rings still hold is taken before they close (a poll takes 4 MiB at most).
        drain_until = time.monotonic() + DRAIN_LIMIT_S
        while col.pump(0) and time.monotonic() < drain_until:
            pass
        feeds.close()
        pending = producer.flush(30)
        marker.clear()
    spooled = producer.spooled
    kept = f" ({spooled} on disk in {producer.spool_folder}: sent next run)" if spooled else ""
    say(
        f"published {col.published} records ({col.events} events), "
        f"{pending} unacknowledged{kept}, "
        f"{producer.failed} failed"
    )
    for line in status.report():
        say(line)
    if producer.failed and producer.last_error:
        say(f"the last failure: {producer.last_error}")
    return 0 if pending == spooled and producer.failed == 0 else 1


class _SpoolWatch:
    """One line when records start going to the spool (Kafka took nothing for a while) and one
    when it is empty again, instead of librdkafka's line per failed connection attempt; and
    one when the spool starts dropping records (its disk full) and one when that is over,
    instead of a line per record."""

    def __init__(self, producer: SpoolingProducer) -> None:
        self._producer = producer
        self._on_disk = producer.spooled > 0  # a spool left by an earlier run: said at start
        self._since, self._base = time.monotonic(), producer.spooled_total
        self._dropping = False
        self._dropped_before = producer.spool_full_dropped  # drops come in spells only

    def tick(self) -> None:
        self._tell_spool()
        self._tell_drops()

    def _tell_spool(self) -> None:
        on_disk = self._producer.spooled > 0
        if on_disk == self._on_disk:
            return
        self._on_disk = on_disk
        if on_disk:
            self._since, self._base = time.monotonic(), self._producer.spooled_total
            say(
                "Kafka takes nothing: records go to the spool in "
                f"{self._producer.spool_folder}, to be sent in order when it is back"
            )
        else:
            kept = self._producer.spooled_total - self._base
            say(f"the spool is sent: {kept} records kept on disk over {self._elapsed()} s")

    def _tell_drops(self) -> None:
        reason = self._producer.dropping
        if (reason is not None) == self._dropping:
            return
        self._dropping = reason is not None
        if reason is not None:
            say(
                f"records are dropped, the spool cannot keep them ({reason}): counted in "
                "spool_full_dropped until it can again; what it holds is kept and sent"
            )
        else:
            dropped = self._producer.spool_full_dropped - self._dropped_before
            self._dropped_before = self._producer.spool_full_dropped
            say(f"the spool keeps records again: {dropped} were dropped while it could not")

    def _elapsed(self) -> str:
        return f"{time.monotonic() - self._since:.0f}"


class _Status:
    """zerotrace's own cost and each feed's losses while the collector runs: a line every
    *every* seconds (0: never) over the interval since the last one, and the whole run's in
    the report. Reads /proc only when a line is due."""

    def __init__(
        self, col: Collector, cost: SelfCost, budget: CpuBudget | None, every: float
    ) -> None:
        self._col, self._cost, self._budget, self._every = col, cost, budget, every
        self._mark, self._published = CostSnapshot(0.0, 0.0, 0, 0), 0
        self._due = every

    def tick(self) -> None:
        if not self._every or self._cost.wall_s < self._due:
            return
        now = self._cost.snapshot()
        self._due = now.wall_s + self._every  # after a stall, one line, not a burst
        interval = now.since(self._mark)
        rate = per_second(self._col.events - self._published, interval.wall_s)
        self._mark, self._published = now, self._col.events
        line = cost_line(interval, self._budget, [("published", rate)], label="status")
        say("; ".join([line, *feed_lines(self._col.counters())]))

    def report(self) -> list[str]:
        """Each feed's losses, then the run's own cost."""
        total = self._cost.snapshot()
        rate = per_second(self._col.events, total.wall_s)
        own = cost_line(total, self._budget, [("published", rate)], label="own cost")
        return [*feed_lines(self._col.counters()), own]


def _collector_producer(
    bus: Any, common: settings.CommonSettings, spool_mb: int
) -> SpoolingProducer:
    """The Kafka producer behind a disk spool, one folder per node id: a collector restarted
    on the node sends what its predecessor kept."""
    from zerotrace.spool_file import SpoolFile
    from zerotrace.spooling_producer import SpoolingProducer

    node = re.sub(r"[^A-Za-z0-9_.-]", "_", common.node_id)  # a node id is not a path
    folder = common.home / "spool" / f"collector-{node}"
    spool = SpoolFile(folder, max(0, spool_mb) * 1024 * 1024)
    gap = RunMarker(folder, time.time).previous()
    if gap:
        say(gap)
    if spool.pending:
        say(f"sending {spool.pending} records kept in {folder} by an earlier run first")
    return SpoolingProducer(bus.producer(), spool, SystemClock())
