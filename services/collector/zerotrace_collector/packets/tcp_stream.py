"""One direction of a TCP connection (pure): sequence numbers -> stream offsets -> bytes in order.

Offsets are unbounded integers counted from the first byte after the SYN (or from the anchor
chosen when the SYN was not captured), so sequence-number wraparound is handled once, in
`offset`, and a stream may carry more than 4 GiB. Overlapping copies of the same bytes keep the
first copy (what the receiving kernel also does for data it has already queued) and count the
bytes that differ.

Every buffered byte keeps the time of the packet that carried it, and bytes are readable at
the latest of their own time and the times of all bytes before them: a retransmission that
fills a hole makes what follows readable at its time, while in a capture reordered after the
fact a late packet carries its true, older time and moves nothing.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field

SEQ_MOD = 1 << 32
HALF = 1 << 31
# Confirmation marks kept per direction (see `Stream.confirmations`). A receiver acknowledges
# every other segment or so, and marks below the delivery point are dropped, so a stream holds
# more only when many holes stay open at once; past it the newest mark is stretched, which only
# lets a later hole's grace start earlier: a gap may come sooner, never later.
MAX_CONFIRMATIONS = 64
# Causal marks kept per direction (see `Stream.waits`): one per segment that came before the
# peer bytes its ACK covers, so only in a reordered capture; past it new marks are not kept
# (counted): the order across directions may then be wrong, the bytes never are.
MAX_WAITS = 256


def seq_diff(a: int, b: int) -> int:
    """a - b in sequence space: the signed distance, in (-2**31, 2**31]."""
    d = (a - b) % SEQ_MOD
    return d - SEQ_MOD if d >= HALF else d


@dataclass(slots=True)
class Insert:
    new_bytes: int = 0
    dup_bytes: int = 0  # bytes already delivered or buffered (retransmission, overlap)
    conflict_bytes: int = 0  # duplicated bytes whose value differs from the first copy
    ahead: bool = False  # new bytes landed beyond a hole: the segment came out of order


@dataclass(slots=True)
class Stream:
    base: int | None = None  # sequence number of offset 0; None until anchored
    next_off: int = 0  # the next offset to deliver
    segments: list[tuple[int, bytes, int]] = field(default_factory=list)  # (off, data, ts)
    buffered: int = 0  # bytes in segments
    pending: list[tuple[int, bytes, int]] = field(default_factory=list)  # (seq, data, ts)
    pending_bytes: int = 0
    pending_fin_seq: int | None = None
    pending_since: tuple[int, int] | None = None  # (flow packet number, ts_ns)
    confirmed: int = 0  # the peer acknowledged (or a FIN closed) everything below this offset
    # (offset, since): everything below offset was confirmed from packet `since` on, one mark per
    # advance of `confirmed` past the delivery point. The grace of the hole at the delivery point
    # runs from the first mark past it, not from the first of a run of holes: a stream whose
    # ACKs keep overtaking their data always has some hole, but each is young.
    confirmations: deque[tuple[int, tuple[int, int]]] = field(default_factory=deque)
    fin_off: int | None = None
    readable_ns: int = 0  # when the bytes delivered so far were all readable
    # (offset, peer offset), by offset: the bytes from offset on were sent after the peer's
    # bytes below peer offset had arrived (their packet acknowledged them), so they are not
    # delivered before those: a request's late segment must not come after its response.
    waits: list[tuple[int, int]] = field(default_factory=list)
    waits_dropped: int = 0

    @property
    def anchored(self) -> bool:
        return self.base is not None

    @property
    def held(self) -> int:
        return self.buffered + self.pending_bytes

    @property
    def held_segments(self) -> int:
        return len(self.segments) + len(self.pending)

    @property
    def finished(self) -> bool:
        return self.fin_off is not None and self.next_off >= self.fin_off

    def offset(self, seq: int) -> int:
        """The offset of seq: the one nearest the delivery point (wraparound)."""
        assert self.base is not None
        return self.next_off + seq_diff(seq, self.base + self.next_off)

    def seq_at(self, off: int) -> int:
        assert self.base is not None
        return (self.base + off) % SEQ_MOD

    def hold(self, seq: int, data: bytes, since: tuple[int, int]) -> None:
        """Keep a segment until the stream is anchored (its first sequence number known);
        since is (flow packet number, time of the packet that carried it)."""
        if data:
            self.pending.append((seq, data, since[1]))
            self.pending_bytes += len(data)
            if self.pending_since is None:
                self.pending_since = since

    def earliest_pending_seq(self) -> int:
        first = self.pending[0][0]
        return first + min(seq_diff(seq, first) for seq, _, _ in self.pending)

    def anchor(self, base: int) -> Insert:
        """Fix offset 0 at sequence number base and file the held segments."""
        self.base = base
        total = Insert()
        for seq, data, ts_ns in self.pending:
            one = self.insert(self.offset(seq), data, ts_ns)
            total.new_bytes += one.new_bytes
            total.dup_bytes += one.dup_bytes
            total.conflict_bytes += one.conflict_bytes
        if self.pending_fin_seq is not None:
            self.set_fin(self.offset(self.pending_fin_seq))
        self.pending, self.pending_bytes, self.pending_since = [], 0, None
        self.pending_fin_seq = None
        return total

    def insert(self, off: int, data: bytes, ts_ns: int = 0) -> Insert:
        result = Insert()
        if self.fin_off is not None and off + len(data) > self.fin_off:
            data = data[: max(0, self.fin_off - off)]  # nothing is sent after a FIN
        end = off + len(data)
        if off < self.next_off:
            skipped = min(end, self.next_off) - off
            result.dup_bytes += skipped
            data, off = data[skipped:], off + skipped
        if off >= end:
            return result
        i = max(0, bisect.bisect_right(self.segments, off, key=lambda s: s[0]) - 1)
        cursor = off
        fresh: list[tuple[int, bytes, int]] = []
        while i < len(self.segments) and self.segments[i][0] < end:
            start, old, _ = self.segments[i]
            old_end = start + len(old)
            if old_end > cursor:
                if start > cursor:
                    fresh.append((cursor, data[cursor - off : start - off], ts_ns))
                lo, hi = max(start, cursor), min(old_end, end)
                mine, theirs = data[lo - off : hi - off], old[lo - start : hi - start]
                result.dup_bytes += hi - lo
                if mine != theirs:
                    result.conflict_bytes += sum(a != b for a, b in zip(mine, theirs, strict=True))
                cursor = max(cursor, old_end)
            i += 1
        if cursor < end:
            fresh.append((cursor, data[cursor - off :], ts_ns))
        for piece in fresh:
            bisect.insort(self.segments, piece, key=lambda s: s[0])
            result.new_bytes += len(piece[1])
        self.buffered += result.new_bytes
        result.ahead = bool(fresh) and fresh[0][0] > self.next_off
        return result

    def wait_for_peer(self, off: int, peer_off: int) -> None:
        """The bytes at off were sent once the peer's bytes below peer_off had arrived."""
        if len(self.waits) >= MAX_WAITS:
            self.waits_dropped += 1
            return
        bisect.insort(self.waits, (off, peer_off))

    def deliverable_until(self, peer: Stream) -> int | None:
        """The offset delivery must stop at until more of the peer's bytes are delivered, or
        None. A wait is over when the peer delivered (or gave up on) the bytes it names, or
        they were never sent (the peer's ACKed FIN or confirmed end is below them)."""
        while (until := self._first_wait(peer)) is not None:
            if not (until == self.next_off and peer._blocked_by(self)):
                return until
            # Each side waits for the other: one of the two ACKs was newer than its data (a
            # retransmission carries the ACK of its own time). The side asked first goes
            # first (the reassembler asks client to server first: requests before responses).
            self.waits.pop(0)
        return None

    def _first_wait(self, peer: Stream) -> int | None:
        while self.waits:
            off, peer_off = self.waits[0]
            if off >= self.next_off and peer.next_off < min(peer_off, peer.confirmed):
                return off
            self.waits.pop(0)
        return None

    def _blocked_by(self, peer: Stream) -> bool:
        """Bytes are ready at the delivery point but wait for the peer's."""
        ready = bool(self.segments) and self.segments[0][0] == self.next_off
        return ready and self._first_wait(peer) == self.next_off

    def take(self, until: int | None = None) -> list[tuple[int, bytes, int]]:
        """The bytes now contiguous at the delivery point (none from `until` on), as pieces
        (offset, data, readable time): consecutive segments readable at the same time are one
        piece."""
        pieces: list[tuple[int, bytes, int]] = []
        while (
            self.segments
            and self.segments[0][0] == self.next_off
            and (until is None or self.next_off < until)
        ):
            off, data, ts_ns = self.segments.pop(0)
            self.buffered -= len(data)
            self.next_off += len(data)
            self.readable_ns = max(self.readable_ns, ts_ns)
            if pieces and pieces[-1][2] == self.readable_ns:
                start, before, _ = pieces[-1]
                pieces[-1] = (start, before + data, self.readable_ns)
            else:
                pieces.append((off, data, self.readable_ns))
        return pieces

    def first_buffered(self) -> int | None:
        return self.segments[0][0] if self.segments else None

    def skip_to(self, off: int) -> int:
        """Give up on the bytes before off (a gap); returns how many were skipped."""
        gap = off - self.next_off
        self.next_off = off
        while self.segments and self.segments[0][0] < off:
            start, data, ts_ns = self.segments.pop(0)
            self.buffered -= len(data)
            if start + len(data) > off:
                rest = data[off - start :]
                self.segments.insert(0, (off, rest, ts_ns))
                self.buffered += len(rest)
        return gap

    def set_fin(self, off: int) -> None:
        """The FIN sits at off. It takes a sequence number of its own, so an ACK of it points
        one past the last byte: acknowledged offsets are capped at the FIN."""
        self.fin_off = off
        self.cap_confirmed(off)

    def cap_confirmed(self, off: int) -> None:
        """Nothing at or past off was sent (a FIN sits there, or an uncaptured one did)."""
        self.confirmed = min(self.confirmed, off)
        self.confirmations = deque((min(o, off), since) for o, since in self.confirmations)

    def confirm(self, off: int, since: tuple[int, int]) -> None:
        if self.fin_off is not None:
            off = min(off, self.fin_off)
        if off <= self.confirmed:
            return
        self.confirmed = off
        if off <= self.next_off:
            return
        if len(self.confirmations) >= MAX_CONFIRMATIONS:
            since = self.confirmations.pop()[1]
        self.confirmations.append((off, since))

    def confirmed_since(self) -> tuple[int, int] | None:
        """Since when the hole at the delivery point is confirmed; None when it is not (yet)."""
        marks = self.confirmations
        while marks and marks[0][0] <= self.next_off:
            marks.popleft()
        return marks[0][1] if marks else None
