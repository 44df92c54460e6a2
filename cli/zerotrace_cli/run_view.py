"""What `zerotrace run` shows a person: a line per LLM request, the live table on a terminal,
and the end-of-run summary (what was seen, what each feed lost, what zerotrace itself cost), as
lines or as a JSON object. Pure formatting over the documents the indexer stored and the
numbers the embedded node gathers."""

from __future__ import annotations

import sys
from collections import Counter, OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from zerotrace import names
from zerotrace.self_cost import cost_line, per_second
from zerotrace_cli.device_view import DevicesSeen
from zerotrace_cli.llm_view import render_llm_view

if TYPE_CHECKING:
    from zerotrace.cpu_budget import CpuBudget
    from zerotrace.self_cost import CostSnapshot

# The collector's own counters (not a feed's): they have no "<feed>." prefix.
COLLECTOR = "collector"
ALWAYS_SHOWN = ("lost", "shed")  # a feed's losses, listed even at 0 so the zero is seen


def llm_line(doc: dict[str, Any]) -> str:
    def ms(key: str) -> str:
        value = doc.get(key)
        return "-" if value is None else f"{value / 1e6:.1f}ms"

    tokens = doc.get("output_tokens")
    mark = "~" if doc.get("output_tokens_estimated") else ""
    outcome = doc.get("error") or doc.get("finish_reason") or ""
    return (
        f"LLM {doc['service']} {doc['model']} {doc['endpoint']} "
        f"{'stream' if doc['stream'] else 'no-stream'} ttft={ms('ttft_ns')} "
        f"tpot={ms('tpot_ns')} tokens={mark}{tokens} {outcome}"
    )


def by_feed(counters: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """The collector's counters ("<feed>.<name>", and its own without a prefix) grouped as
    {feed: {name: count}}, its own under "collector"; feeds in the order they came."""
    out: dict[str, dict[str, int]] = {}
    for key, count in counters.items():
        feed, dot, name = key.partition(".")
        if not dot:
            feed, name = COLLECTOR, key
        out.setdefault(feed, {})[name] = count
    return out


def feed_lines(counters: Mapping[str, int]) -> list[str]:
    """A line per feed, "socket: lost 0, shed 0, truncated 12": lost and shed always, the
    other counts when not 0; and a line of the collector's own counts (backpressure) when one
    is not 0 (what it published is not a loss)."""
    out = []
    for feed, counts in by_feed(counters).items():
        if feed == COLLECTOR:
            shown = [(k, v) for k, v in counts.items() if v and k not in ("published", "events")]
        else:
            shown = [(k, counts.get(k, 0)) for k in ALWAYS_SHOWN]
            shown += [(k, v) for k, v in counts.items() if v and k not in ALWAYS_SHOWN]
        if shown:
            out.append(f"{feed}: " + ", ".join(f"{k} {v}" for k, v in shown))
    return out


def draw_live(summary: Summary, elapsed_s: float) -> None:
    sys.stdout.write("\x1b[H\x1b[2J")  # home and clear: redraw in place
    sys.stdout.write(
        f"zerotrace run  {elapsed_s:.0f}s  {summary.spans} spans  "
        f"{len(summary.llm)} LLM requests\n\n"
    )
    devices = summary.devices.lines()  # none without --gpu-metrics or --rdma
    if devices:
        sys.stdout.write("\n".join(devices) + "\n\n")
    sys.stdout.write(render_llm_view(summary.llm, rows=20) + "\n")
    sys.stdout.flush()


# Span ids remembered to count a span made again once: re-made spans follow within seconds.
RECENT_SPANS = 65_536


class Summary:
    def __init__(self) -> None:
        self.spans = 0
        self.errors = 0
        self.by_kind: Counter[str] = Counter()
        self.by_process: Counter[str] = Counter()
        self.llm: list[dict[str, Any]] = []
        self.profile_windows: Counter[str] = Counter()
        self.profile_samples: Counter[str] = Counter()
        self.trace_links: dict[str, str] = {}  # link id -> rule ("" when taken back)
        self._recent: OrderedDict[str, tuple[str, str, bool]] = OrderedDict()
        self.devices = DevicesSeen()  # GPU and RDMA windows (--gpu-metrics, --rdma)

    def add(self, index: str, doc: dict[str, Any]) -> None:
        if index == names.INDEX_DEVICES:
            self.devices.add(doc)
            return
        if index == names.INDEX_LLM:
            self.llm.append(doc)
            return
        if index == names.INDEX_PROFILES:
            self.profile_windows[doc["profile_type"]] += 1
            self.profile_samples[doc["profile_type"]] += int(doc["samples"])
            return
        if index == names.INDEX_TRACE_EDGES:  # a link taken back replaces its link
            self.trace_links[str(doc["edge_id"])] = (
                str(doc["rule"]) if doc["parent_span_id"] else ""
            )
            return
        # A span made again (its connection's set-up or its file I/O arrived after it, see
        # span_timings.py) keeps its id: it replaces the one counted before, as in the store.
        span_id = str(doc.get("span_id") or "")
        before = self._recent.pop(span_id, None) if span_id else None
        if before is not None:
            self._count(*before, -1)
        seen = (str(doc["kind"]), str(doc["process_name"]), doc["status"] == "ERROR")
        self._count(*seen, 1)
        if span_id:
            self._recent[span_id] = seen
            if len(self._recent) > RECENT_SPANS:
                self._recent.popitem(last=False)

    def _count(self, kind: str, process: str, failed: bool, n: int) -> None:
        self.spans += n
        self.errors += n * failed
        self.by_kind[kind] += n
        self.by_process[process] += n
        for counter, key in ((self.by_kind, kind), (self.by_process, process)):
            if counter[key] <= 0:
                del counter[key]

    def lines(
        self,
        dead_letters: int,
        counters: Mapping[str, int],
        correlator: Mapping[str, int],
        *,
        cost: CostSnapshot | None = None,
        budget: CpuBudget | None = None,
        indexed: int = 0,
    ) -> list[str]:
        """counters: the collector's (a line per feed, losses always shown); correlator: the
        HTTP/LLM correlation's counters (http_counters.py), limits hit and connections given
        up among them, so "no LLM traffic" and "traffic we could not read" look different;
        cost: what zerotrace itself took, with its *budget*; events in are the raw events
        the collector published (a SocketBatch record carries many), out the *indexed*
        documents."""
        kinds = ", ".join(f"{kind} {n}" for kind, n in self.by_kind.most_common())
        out = [
            f"summary: {self.spans} spans ({kinds or 'none'}; {self.errors} failed), "
            f"{len(self.llm)} LLM requests, {dead_letters} dead letters"
        ]
        for name, count in self.by_process.most_common(5):
            out.append(f"  process {name}: {count} spans")
        out += [f"  {line}" for line in feed_lines(counters)]
        seen = ", ".join(f"{k} {v}" for k, v in sorted(correlator.items()) if v)
        if seen:
            out.append(f"  correlator: {seen}")
        if self.profile_windows:
            kinds = ", ".join(
                f"{kind} {n} windows ({self.profile_samples[kind]} samples)"
                for kind, n in sorted(self.profile_windows.items())
            )
            out.append(f"  profiles: {kinds}; see /flamegraph or `zerotrace profile`")
        rules = Counter(rule for rule in self.trace_links.values() if rule)
        if rules:
            by_rule = ", ".join(f"{rule} {n}" for rule, n in sorted(rules.items()))
            out.append(f"  trace links: {sum(rules.values())} ({by_rule}); see /traces")
        out += [f"  {line}" for line in self.devices.lines()]
        if cost is not None:
            rates = _rates(cost, counters.get("events", 0), indexed)
            out.append("  " + cost_line(cost, budget, [("in", rates[0]), ("out", rates[1])]))
        if self.llm:
            out += ["", render_llm_view(self.llm, rows=20)]
        return out

    def document(
        self,
        dead_letters: int,
        counters: Mapping[str, int],
        correlator: Mapping[str, int],
        *,
        cost: CostSnapshot,
        budget: CpuBudget | None,
        indexed: int,
    ) -> dict[str, Any]:
        """The summary as a JSON object (`zerotrace run --summary-json`), for benchmarks:
        the same numbers as :meth:`lines`, the collector's counters as {feed: {name: n}}."""
        events_in, events_out = _rates(cost, counters.get("events", 0), indexed)
        return {
            "spans": self.spans,
            "failed_spans": self.errors,
            "llm_requests": len(self.llm),
            "dead_letters": dead_letters,
            "indexed": indexed,
            "profile_samples": dict(sorted(self.profile_samples.items())),
            "trace_links": dict(sorted(Counter(r for r in self.trace_links.values() if r).items())),
            "counters": by_feed(counters),
            "correlator": dict(correlator),
            "self": {  # CPU comes in clock ticks (10 ms): no more digits than that
                "cpu_s": round(cost.cpu_s, 3),
                "start_cpu_s": round(cost.start_cpu_s, 3),
                "wall_s": round(cost.wall_s, 3),
                "rss_bytes": cost.rss_bytes,
                "peak_rss_bytes": cost.peak_rss_bytes,
                "events_in_per_s": round(events_in, 1),
                "events_out_per_s": round(events_out, 1),
            },
            "budget": None
            if budget is None
            else {"cores": budget.cores, "enforced_by": budget.enforced_by},
        }


def _rates(cost: CostSnapshot, events_in: int, events_out: int) -> tuple[float, float]:
    return per_second(events_in, cost.wall_s), per_second(events_out, cost.wall_s)
