"""What a device window is and how bad a vendor's health verdict is (pure): shared by the
fold that makes the windows (zerotrace_profiler_agg/device_windows.py) and those that read
them (zerotrace_cli/device_view.py, the query service), so none imports another's module.
"""

from __future__ import annotations

__all__ = ["GPU", "HEALTH_ORDER", "RDMA", "health_rank"]

GPU, RDMA = "gpu", "rdma"  # a device window's kind (DeviceWindow.kind)
# The vendors' health verdicts from good to bad (npu-smi prints these four; compared without
# regard to case). A verdict not listed ranks after Critical: a word zerotrace does not know
# ("Unknown", a new driver's "Fatal") is shown to a person, not hidden under a known one.
HEALTH_ORDER = ("ok", "warning", "alarm", "critical")


def health_rank(health: str) -> int:
    """Where a verdict stands in :data:`HEALTH_ORDER` (0 for OK); an unknown one after all."""
    word = health.strip().lower()
    return HEALTH_ORDER.index(word) if word in HEALTH_ORDER else len(HEALTH_ORDER)
