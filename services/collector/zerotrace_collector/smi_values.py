"""The value rules shared by the vendor CLI parsers (amd-smi, rocm-smi, npu-smi; pure): what a
"not available" looks like, how a number with or without its unit is read, and the one error a
malformed output raises.

Vendor CLIs print a missing value as ``N/A``, ``NA``, ``-`` or (amd-smi) a value object whose
value is ``N/A``; all are None here, and None becomes a gap of the sample
(:class:`~zerotrace_collector.gpu_devices.SampleBuilder`). Memory sizes that the tools label
``MB`` are MiB (amd-smi divides bytes by 1024 * 1024; npu-smi prints HBM capacity 65536 for
64 GiB), so :data:`MIB` turns them into bytes.
"""

from __future__ import annotations

import json
import re
from typing import Final

from zerotrace.errors import PoisonInput

__all__ = [
    "MIB",
    "SmiOutputError",
    "load_json",
    "number",
    "number_in",
]

MIB: Final = 1024 * 1024
NOT_AVAILABLE: Final = frozenset({"n/a", "na", "-", "", "not supported", "unsupported"})
_NUMBER = re.compile(r"^\(?\s*(-?\d+(?:\.\d+)?)\s*([A-Za-z%°/]*[A-Za-z%]?)\s*\)?$")


class SmiOutputError(PoisonInput, ValueError):
    """A vendor tool's output that is not the format its parser knows (truncated JSON, a table
    without its header); ``str(exc)`` is one line naming the tool and what was wrong."""


def load_json(text: str, tool: str) -> object:
    """*text* as JSON, or :class:`SmiOutputError` in one line (a truncated output is the usual
    cause: the tool killed mid-write)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SmiOutputError(
            f"{tool}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None


def number(value: object) -> float | None:
    """A number from a vendor value: a plain number, a ``{"value": .., "unit": ..}`` object
    (amd-smi 6.1 on), or a string with an optional unit (``"42 %"``, ``"(1700Mhz)"``, ``"93.6"``).
    Not available, a boolean, or text that is no number: None."""
    if isinstance(value, dict):
        return number(value.get("value"))
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in NOT_AVAILABLE:
            return None
        m = _NUMBER.match(text)
        return float(m.group(1)) if m else None
    return None


def number_in(mapping: object, *path: str) -> float | None:
    """The number at *path* inside nested dicts; None where a step is missing or not a dict."""
    node = mapping
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return number(node)
