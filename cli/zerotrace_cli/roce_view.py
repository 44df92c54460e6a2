"""The terminal table of RoCEv2 queue pair flows (pure), from packets/roce_flows.QpFigures:
one line per flow, busiest first, with its throughput over its first to last packet, PSN
losses, reorders, recovered losses (lost before the capture point, resent) and
retransmissions, NAKs, CNPs and request-to-ACK latency (the definitions are in roce_psn.py and
roce_flows.py)."""

from __future__ import annotations

from collections.abc import Sequence

from zerotrace_collector.packets.roce_flows import QpFigures

HEADER = (
    f"{'ROCE FLOW':<52} {'TRANS':<5} {'PKTS':>8} {'MB/S':>9} {'LOST':>6} {'REORD':>6} "
    f"{'RECOV':>6} {'RETX':>6} {'NAKS':>5} {'CNPS':>5} {'ACK US p50/max (n)':>22}"
)


def render_roce_table(flows: Sequence[QpFigures], rows: int = 30) -> list[str]:
    """The table's lines (none when there are no flows); a last line says how many were left
    out past `rows`."""
    if not flows:
        return []
    ordered = sorted(flows, key=lambda f: (-f.counters["bytes"], f.key))
    lines = [HEADER, *(_line(f) for f in ordered[:rows])]
    if len(ordered) > rows:
        lines.append(f"... {len(ordered) - rows} more flows")
    return lines


def _line(f: QpFigures) -> str:
    c = f.counters
    seconds = f.duration_ns / 1e9
    mb_s = f"{c['bytes'] / seconds / 1e6:.1f}" if seconds > 0 else "-"
    source = f" (qp {f.src_qp:#x})" if f.src_qp is not None else ""
    name = f"{f.key.src} > {f.key.dst} qp {f.key.dest_qp:#x}{source}"
    return (
        f"{_fit(name, 52):<52} {f.transport:<5} {c['packets']:>8} {mb_s:>9} {c['lost']:>6} "
        f"{c['reordered']:>6} {c['recovered']:>6} {c['retransmitted']:>6} {c['naks']:>5} "
        f"{c['cnps']:>5} {_latency(f):>22}"
    )


def _latency(f: QpFigures) -> str:
    if not f.latencies_ns:
        return "-"
    ordered = sorted(f.latencies_ns)
    p50 = ordered[(len(ordered) - 1) // 2]  # of the samples kept (roce_flows.MAX_LATENCIES)
    c = f.counters
    return f"{p50 / 1e3:.1f}/{c['latency_max_ns'] / 1e3:.1f} ({c['latency_count']})"


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
