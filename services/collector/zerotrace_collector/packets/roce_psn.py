"""The request PSNs of one RoCE queue pair direction, as a capture point sees them: gaps,
losses, reorders, go-back retransmissions and duplicates (pure).

A requester numbers its request packets with consecutive 24-bit PSNs (a READ request takes
as many as the responses it asks for). Seen from one point of the path, each PSN is:

- in order: the one expected next (the first PSN seen sets the expectation: a capture may
  join a flow mid-way);
- past a gap: higher than expected; the PSNs skipped are *missing* (`gaps` counts such jumps,
  `gap_psns` the PSNs skipped);
- a fill: a missing PSN arriving late. Which kind is told by the packet after it: when the
  next packet of the stream is a duplicate, the sender had gone back (go-back-N after a
  sequence-error NAK or an ACK timeout), so the fill was a *retransmission of a packet lost
  before the capture point* (`recovered`); otherwise the original was only overtaken
  (`reordered`). Fills still waiting for their next packet at the end count as reordered;
- a duplicate: a PSN seen before (`retransmitted`): the sender sent it again, because of a
  loss after the capture point, a NAK or a timeout.

`lost` counts missing PSNs that never arrived: at the end of the stream (`finish`), when more
than `max_missing` are missing at once (the oldest go first), when one has been missing for
`loss_after_ns` of capture time, or when it falls `MAX_BEHIND` PSNs behind. So a gap that is
later filled is never a loss; loss before the capture point that the sender repaired is
`recovered`, loss after it shows as `retransmitted` (and as the responder's NAKs).

A jump of more than `RESTART_GAP` PSNs either way is a new connection on a reused queue pair
number (a fresh random initial PSN), not a loss: the stream starts over (`restarts`).
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass, field

from zerotrace_collector.packets.roce import PSN_MODULO

_HALF = PSN_MODULO // 2
# A requester has at most a few thousand packets outstanding before it must stop for ACKs
# (its send queue depth), so a forward jump of 65536 PSNs cannot be a loss burst: it is a
# queue pair number reused by a new connection with its own random initial PSN.
RESTART_GAP = 1 << 16
# Serial arithmetic on 24 bits is only defined within half the space; keep far inside it.
MAX_BEHIND = 1 << 22
MAX_MISSING = 4096
# An RC requester retries after its ACK timeout (4.096 us * 2^timeout: 1 s for NCCL's default
# timeout 18, 4 s for 20) up to 7 times; a PSN still missing after 10 s of capture time was
# not going to be resent before the connection failed.
LOSS_AFTER_NS = 10_000_000_000


def psn_diff(a: int, b: int) -> int:
    """a - b in 24-bit serial arithmetic, in [-2^23, 2^23)."""
    return ((a - b + _HALF) % PSN_MODULO) - _HALF


def psn_add(a: int, n: int) -> int:
    return (a + n) % PSN_MODULO


class Verdict(enum.StrEnum):
    FIRST = "first"
    IN_ORDER = "in_order"
    GAP = "gap"
    FILL = "fill"
    DUPLICATE = "duplicate"
    RESTART = "restart"


@dataclass
class PsnCounters:
    gaps: int = 0  # forward jumps past the expected PSN
    gap_psns: int = 0  # PSNs skipped by them
    lost: int = 0  # skipped PSNs never seen
    reordered: int = 0  # skipped PSNs that came late, not as a go-back
    recovered: int = 0  # skipped PSNs that came as the first of a go-back retransmission
    retransmitted: int = 0  # packets whose PSN had been seen before
    restarts: int = 0  # PSN jumps too large to be loss (a new connection on the same QP)


@dataclass
class PsnStream:
    max_missing: int = MAX_MISSING
    loss_after_ns: int = LOSS_AFTER_NS
    counters: PsnCounters = field(default_factory=PsnCounters)
    next_psn: int | None = None  # the PSN expected next
    first_psn: int | None = None  # the first PSN of the current run (since the last restart)
    # Missing PSNs -> the capture time they went missing, oldest first.
    _missing: OrderedDict[int, int] = field(default_factory=OrderedDict)
    _pending_fills: int = 0  # fills not yet classified (waiting for the next packet)
    # After a READ request whose span is only bounded: the most PSNs past next_psn it may
    # have taken.
    _slack: int = 0

    def feed(self, ts_ns: int, psn: int, span: int = 1, span_max: int | None = None) -> Verdict:
        """One request packet. span: PSNs it takes (1, or a READ request's response count);
        span_max: when the span is not known exactly (the path MTU is not), the most it can
        be: a next PSN anywhere in (psn + span, psn + span_max] is then no gap."""
        self.expire(ts_ns)
        if self.next_psn is None:
            self._start(psn, span, span_max)
            return Verdict.FIRST
        ahead = psn_diff(psn, self.next_psn)
        if self._slack and ahead >= 0:
            # The READ before took its least span or up to `slack` PSNs more: the first new
            # PSN after it says how many (a gap only past the most it can have taken).
            taken = min(ahead, self._slack)
            self.next_psn = psn_add(self.next_psn, taken)
            ahead -= taken
            self._slack = 0
        if abs(ahead) > RESTART_GAP:
            self._settle_fills(reordered=True)
            self.counters.lost += len(self._missing)
            self._missing.clear()
            self.counters.restarts += 1
            self._start(psn, span, span_max)
            return Verdict.RESTART
        if ahead >= 0:
            self._settle_fills(reordered=True)
            verdict = Verdict.IN_ORDER
            if ahead > 0:
                verdict = Verdict.GAP
                self.counters.gaps += 1
                self.counters.gap_psns += ahead
                # Past max_missing the oldest would be pushed out as lost at once anyway.
                kept = min(ahead, self.max_missing)
                self.counters.lost += ahead - kept
                for i in range(ahead - kept, ahead):
                    self._add_missing(psn_add(self.next_psn, i), ts_ns)
            self._advance(psn, span, span_max)
            return verdict
        if psn in self._missing:
            del self._missing[psn]
            self._pending_fills += 1
            return Verdict.FILL
        self._settle_fills(reordered=False)
        self.counters.retransmitted += 1
        return Verdict.DUPLICATE

    def finish(self) -> None:
        """End of the stream: fills waiting are reorders, PSNs still missing are lost."""
        self._settle_fills(reordered=True)
        self.counters.lost += len(self._missing)
        self._missing.clear()

    @property
    def missing(self) -> int:
        return len(self._missing)

    def covers(self, psn: int) -> bool:
        """True when psn is one this run has sent: from its first PSN up to the last."""
        if self.next_psn is None or self.first_psn is None:
            return False
        sent = psn_diff(self.next_psn, self.first_psn)
        behind = psn_diff(self.next_psn, psn)
        return 0 < behind <= min(sent, MAX_BEHIND)

    def _start(self, psn: int, span: int, span_max: int | None) -> None:
        self.first_psn = psn
        self._advance(psn, span, span_max)

    def _advance(self, psn: int, span: int, span_max: int | None) -> None:
        self.next_psn = psn_add(psn, span)
        self._slack = 0 if span_max is None else max(span_max - span, 0)

    def _add_missing(self, psn: int, ts_ns: int) -> None:
        if psn in self._missing:
            return
        if len(self._missing) >= self.max_missing:
            self._missing.popitem(last=False)
            self.counters.lost += 1
        self._missing[psn] = ts_ns

    def _settle_fills(self, reordered: bool) -> None:
        if reordered:
            self.counters.reordered += self._pending_fills
        else:
            self.counters.recovered += self._pending_fills
        self._pending_fills = 0

    def expire(self, now_ns: int) -> None:
        """Missing PSNs older than loss_after_ns at capture time now_ns become lost (each
        packet does this; a live capture also calls it while the flow is quiet)."""
        while self._missing:
            psn, since = next(iter(self._missing.items()))
            far = self.next_psn is not None and psn_diff(self.next_psn, psn) > MAX_BEHIND
            if now_ns - since < self.loss_after_ns and not far:
                return
            del self._missing[psn]
            self.counters.lost += 1
