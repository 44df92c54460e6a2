"""zerotrace/device_kinds.py: a device window's kinds, and vendor health verdicts ranked from
OK to Critical without regard to case, an unknown word after all of them."""

from __future__ import annotations

import pytest

from zerotrace.device_kinds import GPU, HEALTH_ORDER, RDMA, health_rank

pytestmark = pytest.mark.unit


def test_the_kinds_are_the_words_the_windows_carry() -> None:
    assert (GPU, RDMA) == ("gpu", "rdma")


def test_verdicts_rank_from_ok_to_critical_ignoring_case_and_spaces() -> None:
    assert HEALTH_ORDER == ("ok", "warning", "alarm", "critical")
    assert [health_rank(h) for h in ("OK", "warning", " ALARM", "Critical\n")] == [0, 1, 2, 3]


def test_an_unknown_verdict_ranks_after_critical() -> None:
    assert health_rank("Unknown") == health_rank("Fatal") == health_rank("") == 4
