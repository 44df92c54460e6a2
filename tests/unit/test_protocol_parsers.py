"""bench.protocol_parsers: every workload is real traffic for its parser (one finished span per
exchange, none failed, the parser never stopped), and the bench prints a row per parser."""

from __future__ import annotations

import pytest

from bench import protocol_parsers as bench
from zerotrace_correlator.protocol_span import ProtoSpan

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("work", bench.WORKLOADS, ids=lambda w: w.name)
def test_each_exchange_is_one_successful_span(work: bench.Workload) -> None:
    parser = work.make()
    for side, data in work.setup:  # a login may be a span of its own: not counted
        parser.feed(side, data, 1, 1)
    spans: list[ProtoSpan] = []
    for t, (side, data) in enumerate(work.exchanges(40), 2):
        spans += parser.feed(side, data, t, t)
    assert not parser.error
    spans += parser.close(10_000)
    assert len(spans) == 40
    assert {s.status for s in spans} == {"ok"}, [s for s in spans if s.status != "ok"][:1]


def test_prints_a_row_per_parser_against_the_http1_baseline(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert bench.main(["--exchanges", "50", "--rounds", "1"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [r.split()[0] for r in rows] == ["http1", *(w.name for w in bench.WORKLOADS)]
    assert rows[0].split()[-1] == "1.00"
