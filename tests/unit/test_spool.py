"""The spool file and the spooling producer's policy, over an in-memory broker twin."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from zerotrace.clock import ManualClock
from zerotrace.errors import Backpressure, ConfigError
from zerotrace.spool_file import SpoolFile, Write, encode_frame
from zerotrace.spooling_producer import DeliveryError, Done, SpoolingProducer

S = 1_000_000_000


class TwinBroker:
    """A producer whose broker is up or away. Up, it delivers what it holds whenever it is
    served (as librdkafka sends in the background and reports on poll); `lazy` holds the
    reports until the next serve() alone, as a producer nobody polls for a while does."""

    def __init__(self, clock: ManualClock, queue_limit: int = 10_000, lazy: bool = False) -> None:
        self.clock = clock
        self.up = True
        self.lazy = lazy
        self.queue: list[tuple[bytes, Done]] = []
        self.topic: list[bytes] = []
        self.queue_limit = queue_limit
        self.delivered = 0
        self.refuse: DeliveryError | None = None  # refuse the next message this way

    def produce_tracked(self, topic: str, key: bytes | None, value: bytes, done: Done) -> None:
        if len(self.queue) >= self.queue_limit:
            raise Backpressure("queue full")
        self.queue.append((value, done))
        if not self.lazy:
            self.serve()

    def serve(self) -> None:
        if not self.up:
            return
        queue, self.queue = self.queue, []
        for value, done in queue:
            if self.refuse is not None:
                refusal, self.refuse = self.refuse, None
                done(refusal)
                continue
            self.topic.append(value)
            self.delivered += 1
            done(None)

    def _fail_all(self, reason: str) -> None:
        queue, self.queue = self.queue, []
        for _value, done in queue:
            done(DeliveryError(reason, permanent=False))

    def expire(self) -> None:
        """The producer gives up on what waited too long (message.timeout.ms)."""
        self._fail_all("Local: Message timed out")

    def purge(self) -> None:
        self._fail_all("Local: Purged in queue")

    def flush(self, timeout_s: float) -> int:
        self.serve()
        if self.queue:
            self.clock.advance(int(timeout_s * S))
        return len(self.queue)

    def outstanding(self) -> int:
        return len(self.queue)

    def close(self) -> None:
        pass


_open: list[SpoolingProducer] = []


@pytest.fixture(autouse=True)
def _close_producers() -> Iterator[None]:
    yield
    while _open:
        _open.pop().close()


def producer(
    tmp_path: Path,
    max_bytes: int = 1 << 20,
    batch: int = 3,
    lazy: bool = False,
    write: Write = os.write,
) -> tuple[SpoolingProducer, TwinBroker, ManualClock]:
    clock = ManualClock(1000 * S)
    broker = TwinBroker(clock, lazy=lazy)
    spool = SpoolFile(tmp_path / "spool", max_bytes, write)
    out = SpoolingProducer(
        broker, spool, clock, stall_s=5, batch=batch, sleep=lambda s: clock.advance(int(s * S))
    )
    _open.append(out)
    return out, broker, clock


def send(p: SpoolingProducer, clock: ManualClock, values: range, every_s: float = 1) -> None:
    for i in values:
        p.produce("raw.socket", f"k{i % 3}".encode(), f"m{i}".encode())
        clock.advance(int(every_s * S))


def expected(values: range) -> list[bytes]:
    return [f"m{i}".encode() for i in values]


def spool_bytes(tmp_path: Path) -> int:
    return (tmp_path / "spool" / "spool.bin").stat().st_size


def test_while_the_broker_acknowledges_nothing_is_spooled(tmp_path: Path) -> None:
    p, broker, clock = producer(tmp_path)
    send(p, clock, range(10))
    assert p.flush(5) == 0
    assert broker.topic == expected(range(10)) and p.spooled_total == 0
    assert spool_bytes(tmp_path) == 0


def test_a_quiet_spell_is_not_an_outage(tmp_path: Path) -> None:
    p, broker, clock = producer(tmp_path, lazy=True)
    send(p, clock, range(3), every_s=6)  # each report waits for the next produce to serve it
    assert p.spooled_total == 0 and broker.topic == expected(range(2))


def test_an_outage_is_spooled_and_sent_in_order_when_the_broker_is_back(tmp_path: Path) -> None:
    p, broker, clock = producer(tmp_path)
    send(p, clock, range(5))
    broker.up = False
    send(p, clock, range(5, 20))  # 15 s away: after 5 s what waited in the producer, then all
    # All on disk; the oldest batch (3) is offered to the producer, to go once it can.
    assert p.spooled == 15 and broker.outstanding() == 3
    broker.up = True
    send(p, clock, range(20, 25))  # the spool goes first, then these, in order
    assert p.flush(10) == 0 and broker.topic == expected(range(25))
    assert p.spooled == 0 and spool_bytes(tmp_path) == 0
    spooled = p.spooled_total
    send(p, clock, range(25, 30))  # straight to the broker again
    assert p.spooled_total == spooled and broker.topic == expected(range(30))
    assert p.flush(5) == 0 and p.failed == 0


def test_stopping_while_the_broker_is_away_keeps_everything_on_disk(tmp_path: Path) -> None:
    p, broker, clock = producer(tmp_path)
    broker.up = False
    send(p, clock, range(10))
    assert p.flush(3) == 10  # what the producer held was purged into the spool
    assert p.spooled == 10 and broker.outstanding() == 0 and p.failed == 0
    p.close()
    _open.remove(p)
    # The next run finds them and sends them first (purged ones behind the stalled spool).
    again, broker2, clock2 = producer(tmp_path)
    assert again.spooled == 10
    send(again, clock2, range(10, 12))
    assert again.flush(5) == 0
    assert sorted(broker2.topic) == sorted(expected(range(12)))
    assert broker2.topic[-2:] == expected(range(10, 12))


def test_what_waited_in_the_producer_goes_to_disk_first(tmp_path: Path) -> None:
    p, broker, clock = producer(tmp_path, batch=4)
    broker.up = False
    send(p, clock, range(10))  # 6 wait in the producer; at the stall they are purged to disk
    assert p.spooled == 10 and broker.outstanding() == 4  # a batch is offered meanwhile
    broker.up = True
    assert p.flush(30) == 0 and p.failed == 0
    assert broker.topic == expected(range(10))


def test_an_outage_during_a_batch_loses_and_repeats_nothing(tmp_path: Path) -> None:
    p, broker, clock = producer(tmp_path, batch=4)
    broker.up = False
    send(p, clock, range(8))
    broker.lazy = True  # the next batch is handed over, then the broker goes away again
    broker.up = True
    send(p, clock, range(8, 9), every_s=0.1)
    # The first batch went; the second holds the rest of the spool, so m8 followed it on.
    assert broker.topic == expected(range(4))
    assert broker.outstanding() == 5 and p.spooled == 4
    broker.up = False
    broker.expire()  # the batch fails: it stays at the head of the spool, m8 joins behind
    assert p.spooled == 5
    broker.lazy, broker.up = False, True
    assert p.flush(30) == 0
    assert broker.topic == expected(range(9))


def test_messages_the_producer_gives_up_on_go_to_disk(tmp_path: Path) -> None:
    p, broker, clock = producer(tmp_path)
    broker.up = False
    send(p, clock, range(3), every_s=0.1)  # not stalled yet: all three wait in the producer
    assert broker.outstanding() == 3 and p.spooled == 0
    broker.expire()
    assert p.spooled == 3 and p.failed == 0 and p.last_error == "Local: Message timed out"
    broker.up = True
    assert p.flush(30) == 0 and broker.topic == expected(range(3))


def test_a_full_producer_queue_spools_instead_of_blocking(tmp_path: Path) -> None:
    p, broker, clock = producer(tmp_path)
    broker.queue_limit = 2
    broker.up = False
    send(p, clock, range(4), every_s=0.1)
    assert broker.outstanding() == 2 and p.spooled == 2
    broker.up = True
    assert p.flush(30) == 0 and broker.topic == expected(range(4))


def test_a_refusal_for_good_is_counted_and_does_not_hold_up_the_rest(tmp_path: Path) -> None:
    p, broker, clock = producer(tmp_path)
    broker.refuse = DeliveryError("Broker: Message size too large", permanent=True)
    send(p, clock, range(3))
    broker.refuse = DeliveryError("Broker: Not enough in-sync replicas", permanent=False)
    send(p, clock, range(3, 6))
    assert p.flush(5) == 0
    # The passing refusal was kept on disk and went again before the next message.
    assert p.failed == 1 and broker.topic == expected(range(1, 6))
    assert p.last_error == "Broker: Not enough in-sync replicas"


def test_a_full_spool_counts_the_loss_with_the_reason(tmp_path: Path) -> None:
    p, broker, clock = producer(tmp_path, max_bytes=60)
    broker.queue_limit = 0  # everything goes to disk at once
    send(p, clock, range(5), every_s=0.1)
    assert p.spooled == 2 and p.failed == 3
    assert p.last_error is not None and p.last_error.startswith("message lost: spool full (60")


class Disk:
    """os.write onto a disk with `room` bytes left (None: plenty), every file of the spool
    alike. As a full filesystem does, a write larger than the room writes what fits and the
    next one is refused (ENOSPC); tests/kernel/test_collector_outages.py fills a real one."""

    def __init__(self) -> None:
        self.room: int | None = None

    def write(self, fd: int, data: bytes) -> int:
        if self.room is None:
            return os.write(fd, data)
        if self.room == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written = os.write(fd, data[: self.room])
        self.room -= written
        return written


def test_a_full_disk_loses_the_message_not_the_ones_kept(tmp_path: Path) -> None:
    disk = Disk()
    spool = SpoolFile(tmp_path / "spool", 1 << 20, disk.write)
    assert spool.append("t", None, b"v0") is None
    disk.room = 5  # a part of the next frame fits
    reason = spool.append("t", None, b"v1")
    assert reason == f"cannot write the spool in {tmp_path / 'spool'}: No space left on device"
    assert spool.pending == 1 and spool_bytes(tmp_path) == len(encode_frame("t", None, b"v0"))
    disk.room = None
    assert spool.append("t", None, b"v2") is None
    assert [f.value for f in spool.peek(5)] == [b"v0", b"v2"]
    spool.close()
    again = SpoolFile(tmp_path / "spool", 1 << 20)  # and so it reads after a restart
    assert [f.value for f in again.peek(5)] == [b"v0", b"v2"]
    again.close()


def test_an_offset_a_full_disk_cannot_take_is_removed_not_left_stale(tmp_path: Path) -> None:
    """Sent frames would then go again after a restart (repeats), never a torn read."""
    disk = Disk()
    folder = tmp_path / "spool"
    spool = SpoolFile(folder, 1 << 20, disk.write)
    for i in range(4):
        assert spool.append("t", None, f"v{i}".encode()) is None
    spool.consume(spool.peek(1))
    assert (folder / "spool.offset").exists()
    disk.room = 0
    spool.consume(spool.peek(1))  # no OSError: sending goes on
    assert spool.pending == 2 and sorted(p.name for p in folder.iterdir()) == [
        "spool.bin",
        "spool.lock",
    ]
    spool.close()
    again = SpoolFile(folder, 1 << 20)
    assert [f.value for f in again.peek(5)] == [b"v0", b"v1", b"v2", b"v3"]
    again.close()


def test_a_full_disk_drops_what_comes_counts_it_and_sends_what_was_kept(tmp_path: Path) -> None:
    disk = Disk()
    p, broker, clock = producer(tmp_path, write=disk.write)
    broker.up = False
    send(p, clock, range(10))  # past the stall: all on disk
    assert p.spooled == 10 and p.dropping is None
    disk.room = 0
    send(p, clock, range(10, 14))
    assert p.spooled == 10 and p.spool_full_dropped == 4 and p.failed == 4
    assert p.counters() == {"spool_full_dropped": 4}
    assert p.dropping is not None and p.dropping.endswith(": No space left on device")
    disk.room = len(encode_frame("raw.socket", b"k2", b"m14"))  # the last page's tail
    send(p, clock, range(14, 16))  # m14 fits, m15 does not: one spell still, not two
    assert p.spool_full_dropped == 5 and p.dropping is not None
    broker.up, disk.room = True, None
    send(p, clock, range(16, 19))  # sent and kept again, but only for 3 s
    assert p.dropping is not None
    send(p, clock, range(19, 22))  # none dropped for 5 s: the spell ends
    assert p.dropping is None
    assert p.flush(30) == 0 and p.spool_full_dropped == p.failed == 5
    assert broker.topic == [*expected(range(10)), b"m14", *expected(range(16, 22))]


def test_the_spool_survives_a_restart_and_drops_a_torn_last_frame(tmp_path: Path) -> None:
    folder = tmp_path / "spool"
    spool = SpoolFile(folder, 1 << 20)
    for i in range(5):
        assert spool.append("t", None if i % 2 else b"key", f"v{i}".encode()) is None
    spool.consume(spool.peek(2))
    spool.close()
    with open(folder / "spool.bin", "ab") as f:
        f.write(b"\x05\x00\x00\x00raw")  # a frame cut by a crash
    again = SpoolFile(folder, 1 << 20)
    assert again.pending == 3
    frames = again.peek(10)
    assert [(f.topic, f.key, f.value) for f in frames] == [
        ("t", b"key", b"v2"),
        ("t", None, b"v3"),
        ("t", b"key", b"v4"),
    ]
    assert again.append("t", b"", b"v5") is None and [f.value for f in again.peek(10)][-1] == b"v5"
    again.consume(again.peek(10))
    assert again.pending == 0 and again.bytes_used == 0
    again.close()


@pytest.mark.parametrize("offset", ["junk", "999999"])
def test_a_bad_offset_file_starts_from_the_beginning(tmp_path: Path, offset: str) -> None:
    folder = tmp_path / "spool"
    spool = SpoolFile(folder, 1 << 20)
    spool.append("t", None, b"v0")
    spool.close()
    (folder / "spool.offset").write_text(offset)
    again = SpoolFile(folder, 1 << 20)
    assert again.pending == 1
    again.close()


def test_a_batch_leaves_the_spool_only_as_far_as_it_was_acknowledged(tmp_path: Path) -> None:
    p, broker, clock = producer(tmp_path, batch=3)
    broker.up = False
    send(p, clock, range(7))  # all on disk after the stall
    broker.expire()
    broker.up = True
    broker.refuse = DeliveryError("Broker: Not enough in-sync replicas", permanent=False)
    assert p.flush(30) == 0 and p.failed == 0
    # m0 was refused for now: the whole batch went again, so m1 and m2 arrived twice.
    assert broker.topic == [b"m1", b"m2", *expected(range(7))]


def test_an_idle_producer_sends_a_spool_left_by_an_earlier_run(tmp_path: Path) -> None:
    spool = SpoolFile(tmp_path / "spool", 1 << 20)
    for i in range(4):
        assert spool.append("raw.socket", None, f"m{i}".encode()) is None
    spool.close()
    p, broker, _clock = producer(tmp_path, batch=3)
    assert p.spooled == 4
    p.tick()
    p.tick()
    assert broker.topic == expected(range(4)) and p.spooled == 0


def test_one_owner_at_a_time(tmp_path: Path) -> None:
    """A second collector with the same node id would interleave frames with the first."""
    first = SpoolFile(tmp_path, 1 << 20)
    with pytest.raises(ConfigError, match=r"in use by another collector \(pid \d+\)"):
        SpoolFile(tmp_path, 1 << 20)
    first.close()
    SpoolFile(tmp_path, 1 << 20).close()  # free again once the first is closed


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    """umask 0: what the process would otherwise create is world-readable and writable."""
    old = os.umask(0)
    yield
    os.umask(old)


def modes(folder: Path) -> dict[str, int]:
    """Permission bits of the folder (".") and of every file in it."""
    paths = [folder, *sorted(folder.iterdir())]
    return {str(p.relative_to(folder)): stat.S_IMODE(p.stat().st_mode) for p in paths}


def test_the_spool_is_private_whatever_the_umask(tmp_path: Path, permissive_umask: None) -> None:
    """The spool holds captured payloads: only the collector's user may read it."""
    spool = SpoolFile(tmp_path / "home" / "spool", 1 << 20)
    assert spool.append("raw.socket", b"k", b"prompt text") is None
    spool.consume(spool.peek(1))  # writes spool.offset (through a temporary file)
    assert spool.append("raw.socket", b"k", b"more") is None
    spool.close()
    assert modes(tmp_path / "home" / "spool") == {
        ".": 0o700,
        "spool.bin": 0o600,
        "spool.lock": 0o600,
        "spool.offset": 0o600,
    }


def test_an_older_wider_spool_is_tightened_and_kept(tmp_path: Path, permissive_umask: None) -> None:
    folder = tmp_path / "spool"
    first = SpoolFile(folder, 1 << 20)
    assert first.append("raw.socket", None, b"m0") is None
    first.close()
    folder.chmod(0o755)
    for path in folder.iterdir():
        path.chmod(0o644)
    again = SpoolFile(folder, 1 << 20)
    assert [f.value for f in again.peek(5)] == [b"m0"]  # what was spooled is still there
    again.close()
    assert modes(folder) == {".": 0o700, "spool.bin": 0o600, "spool.lock": 0o600}
