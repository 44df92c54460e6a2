"""zerotrace/counter_steps.py: a counter's step between two readings, a step up its difference,
a step down (a reset or a wrap) the new value, as Prometheus' increase() counts."""

from __future__ import annotations

import pytest

from zerotrace.counter_steps import counter_step

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("previous", "current", "step"),
    [
        (100, 170, 70),  # up: the difference
        (5, 5, 0),  # unchanged
        (0, 9, 9),
        (170, 12, 12),  # down: a reset, counted from zero
        (2**32 - 10, 3, 3),  # a 32-bit wrap: the new value
        (2**63 - 1, 2**63 - 1, 0),  # a long at its top: exact, no float
    ],
)
def test_a_step_up_counts_the_difference_a_step_down_the_new_value(
    previous: int, current: int, step: int
) -> None:
    assert counter_step(previous, current) == step
