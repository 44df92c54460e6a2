"""GPU cost per LLM request: a serving process's GPU time, kernel launches and memory,
apportioned over the requests it served by the tokens each processed in each interval (pure).

What is measured is per process and per interval, never per request: the GPU time of a pid
over a window (its GPU_TIME profile windows, or its NVML SM utilisation times the window's
length), its kernel launches (GPU_LAUNCH windows), the GPU memory it held (NVML's per-process
used memory, or the GPU_MEM_INUSE snapshot at the window's end). This module shares each
interval's amount out among the requests the pid served that were in flight then, in
proportion to the tokens each processed inside the interval. The store reading is in
llm_gpu_cost_store.py; this file is the definition, exact on fractions.

Definition (v1):

- Work. A request is the model running forward over positions: its prompt's `input_tokens`
  during prefill, then one position per output token after the first (the first output
  token comes out of the prefill pass itself). So a request with input I and output O does
  I + max(O - 1, 0) units of work, placed in time as follows:
    prefill [start, first) carries I,           first = start + ttft_ns,
    decode  [first, end)   carries max(O-1, 0),
  each spread evenly over its segment (a token's work is where the server was computing it,
  not the instant it was sent). Without a usable TTFT the whole [start, end) carries
  I + max(O-1, 0) evenly. TTFT is unusable when null, negative, not before the end
  (ttft >= end - start), or the answer was not streamed (the document's `stream` false): a
  non-streamed answer's only content event is its body's last byte, so its TTFT is the whole
  request and says nothing of when prefill ended. A segment of zero length puts its work at
  its instant. A missing count counts 0.
- Why tokens processed, not only tokens produced: a request in prefill produces nothing yet
  draws the GPU hardest; counting only output tokens would hand its prefill to whoever was
  decoding beside it. One unit per position is the FLOP view (about 2 x parameters per token,
  prompt or output), which is also what a batched step's compute is made of.
- Share. For one interval [a, b) with amount A (ns of GPU time, launches, or byte-ns of
  memory = bytes x (b - a)), and w_r the work of request r inside [a, b) (its segments'
  overlap with [a, b), pro rata; an instant counts when a <= t < b):
    share_r = A * w_r / sum over all requests of w,     when that sum > 0;
  when no request did work in the interval, A is unattributed (the process was busy between
  requests, or with requests no one observed). A request's cost is the sum of its shares
  over the intervals; it is None (unknown, not 0) when no interval of that measure overlaps
  the request at all (neither its span, by the same rule, nor any of its work). Every
  request of the pid in flight in the intervals must be given, not only the ones asked
  about, or the ones given take the others' shares.
- Intervals of one measure may overlap (two devices, two services of one pid): each is
  shared out on its own and the shares add.

Error, what the estimate cannot see:

- Batching inside the server: a step runs every sequence in the batch at once; the estimate
  knows only each request's token counts and times, not which step each token was in, and
  spreads tokens evenly over a segment (a request that paused in a queue is charged there).
- Non-streamed answers: with no usable TTFT, prefill and decode are not told apart; the
  work is spread evenly over the whole request, so a window holding only its prefill is
  charged the same per ns as one holding only its decode.
- Prefill versus decode: a prefill position costs less GPU time than a decode position
  (compute bound in parallel, versus memory bound one token at a time), and attention grows
  with context; counting every position as one unit charges long prompts more than the time
  they took, long generations less.
- Other work of the process: warm-up, CUDA graphs captured, requests not observed (TLS not
  hooked, another port) all end up shared among the observed requests of the same interval,
  or unattributed when none was in flight.
- Other processes on the GPU: NVML's utilisation is per process, but SM utilisation is the
  share of time a kernel of the process ran, not the share of the GPU it filled; two
  processes each at 100 % on one GPU are each charged the full time.
- Window granularity: an interval's amount is one number (10 s profile windows, 5 s device
  windows by default); a request that did a little work in a busy window of other requests
  gets its token share of the whole window, wherever in the window the GPU was busy. Shorter
  windows (ZEROTRACE_PROFILE_WINDOW_MS) narrow this.
- Memory: the level of an interval is one number (the snapshot at its end, or NVML's last
  sample in it); what a server allocates up front (weights, the KV cache pool) is shared by
  tokens like the rest, so memory-time says how long a request kept the held memory busy,
  not what it allocated.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

METHOD_VERSION = "tokens-processed/v1"
NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class Interval:
    """An amount a process drew over [start_ns, end_ns): ns of GPU time, launches, or
    byte-ns of memory."""

    start_ns: int
    end_ns: int
    amount: Fraction


@dataclass(frozen=True)
class Segment:
    """Work spread evenly over [start_ns, end_ns), or at start_ns when they are equal."""

    start_ns: int
    end_ns: int
    work: int


@dataclass(frozen=True)
class RequestWork:
    key: Hashable
    start_ns: int
    end_ns: int
    segments: tuple[Segment, ...]


@dataclass(frozen=True)
class Apportioned:
    """Each request's cost (None: no interval overlapped it), and what the intervals given
    held in all, split into what went to requests and what no request's work was in."""

    shares: dict[Hashable, Fraction | None]
    attributed: Fraction
    unattributed: Fraction


def _count(value: Any) -> int:
    return max(int(value), 0) if value is not None else 0


def request_work(
    key: Hashable,
    start_ns: int,
    end_ns: int,
    ttft_ns: int | None,
    input_tokens: int | None,
    output_tokens: int | None,
    streamed: bool = True,
) -> RequestWork:
    """Where the request's work lies in time (the module doc's definition). `streamed`
    false: the answer came whole, so its TTFT is not when prefill ended."""
    end_ns = max(end_ns, start_ns)
    prefill, decode = _count(input_tokens), max(_count(output_tokens) - 1, 0)
    segments: tuple[Segment, ...]
    if streamed and ttft_ns is not None and 0 <= ttft_ns < end_ns - start_ns:
        first = start_ns + ttft_ns
        segments = (Segment(start_ns, first, prefill), Segment(first, end_ns, decode))
    else:
        segments = (Segment(start_ns, end_ns, prefill + decode),)
    return RequestWork(key, start_ns, end_ns, tuple(s for s in segments if s.work))


def work_of(doc: Mapping[str, Any], key: Hashable) -> RequestWork:
    """request_work from an LlmRequest document (zerotrace.derived.LlmRequest's fields). A
    missing `stream` is not known to be false, so the TTFT is kept."""
    ttft = doc.get("ttft_ns")
    return request_work(
        key,
        int(doc["start_ns"]),
        int(doc["end_ns"]),
        None if ttft is None else int(ttft),
        doc.get("input_tokens"),
        doc.get("output_tokens"),
        streamed=doc.get("stream") is not False,
    )


def work_in(segment: Segment, start_ns: int, end_ns: int) -> Fraction:
    """The segment's work inside [start_ns, end_ns)."""
    if segment.end_ns == segment.start_ns:
        inside = start_ns <= segment.start_ns < end_ns
        return Fraction(segment.work if inside else 0)
    overlap = min(segment.end_ns, end_ns) - max(segment.start_ns, start_ns)
    if overlap <= 0:
        return Fraction(0)
    return Fraction(segment.work * overlap, segment.end_ns - segment.start_ns)


def _in_flight(request: RequestWork, interval: Interval) -> bool:
    """The request's span meets the interval, by work_in's rule: [start, end) overlaps, or
    a zero-length request's instant t has a <= t < b."""
    if request.end_ns == request.start_ns:
        return interval.start_ns <= request.start_ns < interval.end_ns
    return interval.start_ns < request.end_ns and interval.end_ns > request.start_ns


def apportion(intervals: Iterable[Interval], requests: Sequence[RequestWork]) -> Apportioned:
    """Each interval's amount shared among the requests by their work in it (module doc)."""
    shares: dict[Hashable, Fraction | None] = {r.key: None for r in requests}
    attributed = unattributed = Fraction(0)
    for interval in intervals:
        works = []
        for request in requests:
            w = sum(
                (work_in(s, interval.start_ns, interval.end_ns) for s in request.segments),
                Fraction(0),
            )
            # Work in the interval always counts, even a zero-length segment at the span's
            # end; a request in flight that did none there is a known zero, not unknown.
            if w or _in_flight(request, interval):
                works.append((request.key, w))
                if shares[request.key] is None:
                    shares[request.key] = Fraction(0)
        total = sum((w for _, w in works), Fraction(0))
        if total == 0:
            unattributed += interval.amount
            continue
        attributed += interval.amount
        for key, w in works:
            shares[key] = (shares[key] or Fraction(0)) + interval.amount * w / total
    return Apportioned(shares, attributed, unattributed)


def time_interval(start_ns: int, end_ns: int, busy_ns: int | float) -> Interval:
    """GPU time measured as ns (a GPU_TIME window's total)."""
    return Interval(start_ns, end_ns, Fraction(busy_ns))


def utilisation_interval(start_ns: int, end_ns: int, util_pct: float) -> Interval:
    """GPU time from an SM utilisation over the interval: util_pct / 100 of its length
    (exact on the stored double)."""
    return Interval(start_ns, end_ns, Fraction(util_pct) * (end_ns - start_ns) / 100)


def memory_interval(start_ns: int, end_ns: int, bytes_held: int) -> Interval:
    """Memory held through the interval, as byte-ns."""
    return Interval(start_ns, end_ns, Fraction(int(bytes_held) * (end_ns - start_ns)))


def byte_seconds(byte_ns: Fraction) -> Fraction:
    return byte_ns / NS_PER_S
