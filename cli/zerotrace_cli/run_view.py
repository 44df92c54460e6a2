"""What `zerotrace run` shows a person: a line per LLM request, the live table on a terminal,
and the end-of-run summary. Pure formatting over the documents the indexer stored."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping
from typing import Any

from zerotrace import names
from zerotrace_cli.llm_view import render_llm_view


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


def draw_live(summary: Summary, elapsed_s: float) -> None:
    sys.stdout.write("\x1b[H\x1b[2J")  # home and clear: redraw in place
    sys.stdout.write(
        f"zerotrace run  {elapsed_s:.0f}s  {summary.spans} spans  "
        f"{len(summary.llm)} LLM requests\n\n"
    )
    sys.stdout.write(render_llm_view(summary.llm, rows=20) + "\n")
    sys.stdout.flush()


class Summary:
    def __init__(self) -> None:
        self.spans = 0
        self.errors = 0
        self.by_kind: Counter[str] = Counter()
        self.by_process: Counter[str] = Counter()
        self.llm: list[dict[str, Any]] = []
        self.profile_windows: Counter[str] = Counter()
        self.profile_samples: Counter[str] = Counter()

    def add(self, index: str, doc: dict[str, Any]) -> None:
        if index == names.INDEX_LLM:
            self.llm.append(doc)
            return
        if index == names.INDEX_PROFILES:
            self.profile_windows[doc["profile_type"]] += 1
            self.profile_samples[doc["profile_type"]] += int(doc["samples"])
            return
        self.spans += 1
        self.errors += doc["status"] == "ERROR"
        self.by_kind[doc["kind"]] += 1
        self.by_process[doc["process_name"]] += 1

    def lines(
        self, dead_letters: int, counters: dict[str, int], correlator: Mapping[str, int]
    ) -> list[str]:
        """correlator: the HTTP/LLM correlation's counters (http_counters.py), limits hit and
        connections given up among them, so "no LLM traffic" and "traffic we could not read"
        look different."""
        kinds = ", ".join(f"{kind} {n}" for kind, n in self.by_kind.most_common())
        out = [
            f"summary: {self.spans} spans ({kinds or 'none'}; {self.errors} failed), "
            f"{len(self.llm)} LLM requests, {dead_letters} dead letters"
        ]
        for name, count in self.by_process.most_common(5):
            out.append(f"  process {name}: {count} spans")
        losses = {k: v for k, v in counters.items() if v and k != "published"}
        if losses:
            out.append("  counted: " + ", ".join(f"{k} {v}" for k, v in sorted(losses.items())))
        seen = ", ".join(f"{k} {v}" for k, v in sorted(correlator.items()) if v)
        if seen:
            out.append(f"  correlator: {seen}")
        if self.profile_windows:
            kinds = ", ".join(
                f"{kind} {n} windows ({self.profile_samples[kind]} samples)"
                for kind, n in sorted(self.profile_windows.items())
            )
            out.append(f"  profiles: {kinds}; see /flamegraph or `zerotrace profile`")
        if self.llm:
            out += ["", render_llm_view(self.llm, rows=20)]
        return out
