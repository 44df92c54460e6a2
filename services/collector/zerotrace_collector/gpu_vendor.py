"""Which vendor's adapter the GPU metrics feed reads (``--gpu-vendor``), as one
:class:`~zerotrace_collector.gpu_devices.GpuDeviceSource` (pure: the adapters come in as
factories, nothing here loads a library or runs a tool itself).

``auto`` tries each vendor in :data:`AUTO_ORDER`, NVML first (a library load, no process
started), then AMD, then ``npu-smi``, and reads the first whose adapter opens; a named vendor
is tried alone. A vendor may have several adapters, tried in the order given: AMD's ``amdsmi``
Python package first (calls in this process), then the ``amd-smi`` CLI; the chosen line's
label says which one is read. An adapter that opens but lists no device (the tool installed on
a node without its GPUs) counts as not there. Either way the node is told in one line which adapter
is read and what it found, or why none is: the adapters' own "not installed" lines shortened to
a phrase each, any other failure (a library that did not start) said as it came.
A vendor that cannot be read is never an error of the run: the feed stays idle.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from zerotrace.errors import FeatureUnavailable
from zerotrace_collector.gpu_devices import DeviceEvent, DeviceInfo, DeviceSample, GpuDeviceSource

__all__ = [
    "AUTO",
    "AUTO_ORDER",
    "VENDOR_CHOICES",
    "Candidate",
    "VendorChoice",
    "chosen_line",
    "none_line",
    "tried_in_order",
]

AUTO = "auto"
AUTO_ORDER = ("nvidia", "amd", "ascend")
VENDOR_CHOICES = (AUTO, *AUTO_ORDER)
# The adapters' lines end with what is turned off (": AMD GPU metrics off"); in a line that
# lists several vendors that tail is said once, for all of them.
_OFF_TAIL = re.compile(r":\s[^:]*\boff$")


@dataclass(frozen=True)
class Candidate:
    """One vendor's adapter as ``--gpu-vendor`` names it."""

    choice: str  # nvidia, amd, ascend (several candidates may share one: tried in turn)
    # How the chosen line names it ("NVIDIA GPUs through NVML", "AMD GPUs through the amdsmi
    # package"); an adapter that runs a tool has the tool's path after it ("AMD GPUs through"
    # /opt/rocm/bin/amd-smi).
    label: str
    absent: str  # the adapter's exact line when its library or tool is not installed
    absent_short: str  # that line as a phrase of the "none" line: "no amd-smi on PATH"
    make: Callable[[], GpuDeviceSource]


def tried_in_order(choice: str, candidates: Sequence[Candidate]) -> list[Candidate]:
    """The candidates *choice* tries, in the order it tries them (by vendor, and a vendor's
    own adapters in their order in *candidates*); ValueError for a choice that is not one of
    :data:`VENDOR_CHOICES` (argparse refuses it before)."""
    if choice not in VENDOR_CHOICES:
        raise ValueError(f"GPU vendor {choice!r} is not one of {', '.join(VENDOR_CHOICES)}")
    order = AUTO_ORDER if choice == AUTO else (choice,)
    return [c for vendor in order for c in candidates if c.choice == vendor]


def reason_of(candidate: Candidate, exc: FeatureUnavailable) -> str:
    """The phrase for one adapter that did not open."""
    line = str(exc)
    return candidate.absent_short if line == candidate.absent else _OFF_TAIL.sub("", line)


def none_line(choice: str, reasons: Sequence[str]) -> str:
    """No adapter opened: ``GPU metrics: no NVML library (...), no amd-smi ...: skipped``."""
    asked = "" if choice == AUTO else f" (--gpu-vendor {choice})"
    return f"GPU metrics{asked}: {', '.join(reasons)}: skipped"


def chosen_line(
    label: str, devices: Sequence[DeviceInfo], where: str | None, passed_over: Sequence[str]
) -> str:
    """One adapter opened: what it reads and what it found; the vendors tried before it that
    were there but failed are named, so a broken NVIDIA driver is not hidden by a working
    amd-smi."""
    models = Counter(d.model for d in devices)
    found = ", ".join(f"{n} x {model}" for model, n in models.items())
    line = f"GPU metrics: {_through(label, where)}: {found}"
    return line + (f"; passed over: {'; '.join(passed_over)}" if passed_over else "")


def _through(label: str, where: str | None) -> str:
    return f"{label} {where}" if where else label


class VendorChoice:
    """The GPU device source ``--gpu-vendor`` asks for: opens the candidates in turn and reads
    the first that opens, through to its close. Before :meth:`open` has chosen, :attr:`vendor`
    is the choice as given."""

    def __init__(
        self,
        choice: str,
        candidates: Sequence[Candidate],
        note: Callable[[str], None] | None = None,
    ) -> None:
        """note: where the chosen line goes (default :attr:`notes`); the "none" line is the
        FeatureUnavailable that :meth:`open` raises (the feed says it)."""
        self.choice = choice
        self.vendor = choice  # the chosen adapter's (nvidia, amd, huawei) once open() chose
        self._tried = tried_in_order(choice, candidates)
        self.notes: list[str] = []
        self._note = note or self.notes.append
        self._source: GpuDeviceSource | None = None

    @property
    def chosen(self) -> GpuDeviceSource | None:
        return self._source

    @property
    def reads_block(self) -> bool:
        """Whether the chosen adapter's reads run a tool (see GpuMetricsFeed)."""
        return bool(getattr(self._source, "reads_block", False))

    def open(self) -> list[DeviceInfo]:
        reasons: list[str] = []
        passed_over: list[str] = []
        for candidate in self._tried:
            source = candidate.make()
            try:
                devices = source.open()
            except FeatureUnavailable as exc:
                reason = reason_of(candidate, exc)
                reasons.append(reason)
                if str(exc) != candidate.absent:
                    passed_over.append(reason)
                continue
            where = getattr(source, "tool_path", None)
            if not devices:  # a tool that is installed on a node without its GPUs
                source.close()
                reasons.append(f"{_through(candidate.label, where)} listed no device")
                continue
            self._source, self.vendor = source, source.vendor
            self._note(chosen_line(candidate.label, devices, where, passed_over))
            return devices
        raise FeatureUnavailable(none_line(self.choice, reasons))

    def _opened(self) -> GpuDeviceSource:
        if self._source is None:
            raise RuntimeError("VendorChoice used before open() chose an adapter")
        return self._source

    def driver_version(self) -> str | None:
        return self._opened().driver_version()

    def sample(self, device: DeviceInfo, ts_ns: int) -> DeviceSample:
        return self._opened().sample(device, ts_ns)

    def wait_events(self, timeout_ms: int) -> list[DeviceEvent]:
        return self._opened().wait_events(timeout_ms)

    def events_supported(self, device: DeviceInfo) -> bool:
        return self._opened().events_supported(device)

    def counters(self) -> dict[str, int]:
        return self._source.counters() if self._source is not None else {}

    def close(self) -> None:
        if self._source is not None:
            self._source.close()
