"""`zerotrace gpu-report DIR...`: the chip comparison report of recorded amd-smi, rocm-smi and
npu-smi outputs (one reading of one node per folder; see the collector's smi_recordings), as a
terminal table, and with ``--html FILE`` as one self-contained HTML page."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from zerotrace.errors import ConfigError
from zerotrace_cli.chip_report_view import render_html, render_text
from zerotrace_collector.chip_report import chip_report
from zerotrace_collector.smi_recordings import read_recording
from zerotrace_collector.smi_values import SmiOutputError


def register(sub: Any) -> None:
    p = sub.add_parser(
        "gpu-report",
        help="compare GPU/NPU chip models side by side from recorded vendor CLI outputs",
        description="Reads recording folders (amd-smi static/metric/list/process JSON, "
        "rocm-smi --showallinfo JSON, npu-smi info and info -t TYPE text, as under "
        "tests/fixtures/amd_smi and tests/fixtures/npu_smi) and prints per chip model the "
        "min, mean, p50, p95 and max of each metric and the share of samples where it was a gap.",
    )
    p.add_argument("folders", nargs="+", type=Path, metavar="DIR", help="a recording folder")
    p.add_argument("--html", type=Path, metavar="FILE", help="also write the report as HTML")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    samples = []
    for folder in args.folders:
        if not folder.is_dir():
            raise ConfigError(f"{folder}: not a folder")
        try:
            samples.extend(read_recording(folder))
        except SmiOutputError as exc:
            raise ConfigError(str(exc)) from None
    rows = chip_report(samples)
    print("\n".join(render_text(rows)))
    if args.html is not None:
        args.html.write_text(render_html(rows), encoding="utf-8")
    return 0
