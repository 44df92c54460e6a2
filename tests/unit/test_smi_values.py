"""Vendor values: numbers with and without units, value objects, not-available spellings."""

from __future__ import annotations

import pytest

from zerotrace_collector.smi_values import SmiOutputError, load_json, number, number_in

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (42, 42.0),
        (93.6, 93.6),
        ("93.6", 93.6),
        ("42 %", 42.0),
        ("29 °C", 29.0),
        ("(1700Mhz)", 1700.0),
        ("32 GT/s", 32.0),
        ({"value": 734, "unit": "W"}, 734.0),
        ({"value": "N/A", "unit": "W"}, None),
        ("N/A", None),
        ("NA", None),
        ("-", None),
        ("", None),
        ("ENABLED", None),
        (True, None),
        (None, None),
        ([1], None),
    ],
)
def test_number(value: object, expected: float | None) -> None:
    assert number(value) == expected


def test_number_in_nested() -> None:
    data = {"usage": {"gfx_activity": {"value": 5, "unit": "%"}}, "power": "N/A"}
    assert number_in(data, "usage", "gfx_activity") == 5.0
    assert number_in(data, "power", "socket_power") is None
    assert number_in(data, "missing") is None


def test_load_json_errors_in_one_line() -> None:
    assert load_json('{"a": 1}', "amd-smi") == {"a": 1}
    with pytest.raises(SmiOutputError, match=r"^rocm-smi: not JSON \(Expecting value at line 1"):
        load_json("WARNING: no GPUs\n", "rocm-smi")
    assert isinstance(SmiOutputError("x"), ValueError)
