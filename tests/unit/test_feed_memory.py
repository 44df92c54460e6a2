"""The in-memory feed (zerotrace_collector/feed_memory.py), the twin of an eBPF feed: it keeps a
probe feed's contract (poll drains and waits at most its timeout, a push wakes it, close
discards, counters outlive close, attach says why a probe cannot run). The collector loop over
it is tested in test_collector.py, whose records these tests share."""

from __future__ import annotations

import threading
import time

import pytest

from tests.unit.test_collector import attached, file_open
from zerotrace_collector.errors import ProbeUnavailable
from zerotrace_collector.feed_memory import InMemoryFeed
from zerotrace_collector.feeds import Feed, RawRecord

pytestmark = pytest.mark.unit

# A poll that waited for this long would trip the suite's timeout rather than pass slowly.
LONG_MS = 600_000


def test_the_twin_satisfies_the_feed_protocol() -> None:
    feed: Feed = InMemoryFeed("twin", follows=True)
    assert feed.name == "twin" and feed.follows


def test_poll_hands_over_what_waits_without_waiting() -> None:
    feed = attached(InMemoryFeed(records=[file_open(1)]))
    feed.push(file_open(2), file_open(3))
    assert feed.waiting == 3
    started = time.monotonic()
    assert [r.datum["event_id"] for r in feed.poll(LONG_MS)] == ["f-1-0", "f-2-0", "f-3-0"]
    assert time.monotonic() - started < 5
    assert feed.waiting == 0
    assert feed.poll(0) == []  # a poll drains: nothing is handed over twice


def test_an_empty_poll_waits_its_timeout_and_a_push_wakes_it() -> None:
    feed = attached(InMemoryFeed())
    started = time.monotonic()
    assert feed.poll(20) == []
    assert time.monotonic() - started >= 0.015
    got: list[RawRecord] = []
    waiter = threading.Thread(target=lambda: got.extend(feed.poll(-1)))
    waiter.start()
    feed.push(file_open(4))
    waiter.join(timeout=10)
    assert not waiter.is_alive() and got == [file_open(4)]


def test_close_wakes_a_waiting_poll_and_discards_what_was_not_read() -> None:
    feed = attached(InMemoryFeed())
    got: list[list[RawRecord]] = []
    waiter = threading.Thread(target=lambda: got.append(feed.poll(LONG_MS)))
    waiter.start()
    while not feed.polls:  # the poll has started (and is waiting under the lock)
        time.sleep(0.001)
    feed.close()
    waiter.join(timeout=10)
    assert not waiter.is_alive() and got == [[]]
    feed.close()  # idempotent
    assert feed.waiting == 0


def test_poll_needs_an_attached_open_feed() -> None:
    feed = InMemoryFeed(records=[file_open(1)])
    with pytest.raises(RuntimeError, match="before attach"):
        feed.poll(0)
    feed.attach()
    feed.lose(3)
    feed.close()
    with pytest.raises(RuntimeError):
        feed.poll(0)
    with pytest.raises(RuntimeError, match="after close"):
        feed.push(file_open(2))
    assert feed.counters() == {"lost": 3}  # still readable once closed, as a probe's


def test_counters_start_at_zero_and_add_up_what_was_told() -> None:
    feed = InMemoryFeed()
    assert feed.counters() == {"lost": 0}
    feed.lose()
    feed.lose(5, "truncated")
    feed.lose(0, "malformed")
    assert feed.counters() == {"lost": 1, "truncated": 5, "malformed": 0}
    feed.counters()["lost"] = 99  # a copy: the caller cannot change the feed's counts
    assert feed.counters()["lost"] == 1
    with pytest.raises(ValueError):
        feed.lose(-1)


def test_attach_says_why_a_probe_cannot_run() -> None:
    feed = InMemoryFeed(unavailable="kernel 5.4 has no BPF ring buffer; need 5.8")
    with pytest.raises(ProbeUnavailable, match=r"need 5\.8"):
        feed.attach()
    assert not feed.attached


def test_a_closed_feed_cannot_be_attached_again() -> None:
    feed = attached(InMemoryFeed("once"))
    feed.close()
    with pytest.raises(RuntimeError, match="after close"):
        feed.attach()
