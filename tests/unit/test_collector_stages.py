"""bench/collector_stages.py: its ring image walks back to the records it was made of, and a
small run prints every stage for both ways of publishing and the verdict lines."""

from __future__ import annotations

import re

import pytest

from bench import collector_stages as cs

pytestmark = pytest.mark.unit


def test_the_ring_image_holds_the_probe_records_in_order_across_polls() -> None:
    records = list(cs.probe_records(100, 8))
    image, mask, producer = cs.ring_image(records)
    assert producer == sum(8 + len(r) + (-len(r) % 8) for r in records)
    assert cs.read_ring(image, mask, producer, per_poll_bytes=1000) == records


def test_a_small_run_prints_each_stage_and_the_whole_chain(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert (
        cs.main(["--events", "3000", "--connections", "16", "--per-poll", "500", "--no-kafka"]) == 0
    )
    out = capsys.readouterr().out
    for stage in ("ring", "decode", "record", "encode", "produce"):
        assert re.search(rf"^{stage} +\d+\.\d\d +\d+\.\d\d$", out, re.MULTILINE), stage
    assert re.search(r"^batches: \d[\d,]* Kafka messages \(\d+\.\d events each\)", out, re.M)
    assert "singles: 3,000 Kafka messages (1.0 events each)" in out
    assert len(re.findall(r"^whole chain, .*: (PASS|MISS)$", out, re.MULTILINE)) == 2
    assert re.search(r"^redact \(part of record, batches\): \d+\.\d\d us per event", out, re.M)


def test_llm_calls_carry_a_key_and_content_for_the_redactor() -> None:
    records = list(cs.probe_records(4, 2, llm=True))
    assert b"Authorization: Bearer sk-" in records[0] and b'"content":" bullet"' in records[2]
