"""Recorded vendor CLI outputs, read from a folder and parsed into device samples (read, then
parse: each file is one read here, the parsing is amd_smi_parse's and npu_smi_parse's).

A recording folder holds the outputs of one reading of one node, named by command:

- amd-smi: ``static.json``, ``metric.json``, optional ``list.json`` and ``process.json``;
- rocm-smi: ``showallinfo.json`` (``rocm-smi --showallinfo --json``);
- npu-smi: ``info.txt`` and optional ``<type>-<npu>.txt`` (``npu-smi info -t <type> -i <npu>``).

The folders under tests/fixtures/amd_smi and tests/fixtures/npu_smi are such recordings; the
``gpu-report`` command compares the chips of any number of them.
"""

from __future__ import annotations

from pathlib import Path

from zerotrace_collector.amd_smi_parse import (
    devices_of,
    metric_samples,
    parse_list,
    parse_process,
    parse_rocm_smi,
    parse_static,
)
from zerotrace_collector.gpu_devices import DeviceSample
from zerotrace_collector.npu_smi_parse import chip_samples, parse_detail, parse_info
from zerotrace_collector.smi_values import SmiOutputError

__all__ = ["read_recording"]


def _read(folder: Path, name: str) -> str | None:
    path = folder / name
    return path.read_text(encoding="utf-8") if path.is_file() else None


def read_recording(folder: Path, ts_ns: int = 0) -> list[DeviceSample]:
    """The samples of one recording folder, taken at *ts_ns*; :class:`SmiOutputError` when
    the folder holds no known recording or a file is malformed (the message names the file)."""
    try:
        return _samples(folder, ts_ns)
    except SmiOutputError as exc:
        raise SmiOutputError(f"{folder}: {exc}") from None


def _samples(folder: Path, ts_ns: int) -> list[DeviceSample]:
    metric = _read(folder, "metric.json")
    if metric is not None:
        static_text = _read(folder, "static.json")
        if static_text is None:
            raise SmiOutputError("metric.json without static.json")
        list_text = _read(folder, "list.json")
        process_text = _read(folder, "process.json")
        devices = devices_of(parse_static(static_text), parse_list(list_text) if list_text else {})
        procs = parse_process(process_text) if process_text else {}
        return metric_samples(metric, devices, ts_ns, procs)
    legacy = _read(folder, "showallinfo.json")
    if legacy is not None:
        return parse_rocm_smi(legacy, ts_ns)
    info = _read(folder, "info.txt")
    if info is not None:
        details = []
        for path in sorted(folder.glob("*-*.txt")):
            try:
                details.extend(parse_detail(path.read_text(encoding="utf-8")))
            except SmiOutputError as exc:
                raise SmiOutputError(f"{path.name}: {exc}") from None
        return chip_samples(parse_info(info), ts_ns, details)
    raise SmiOutputError("no metric.json, showallinfo.json or info.txt: not a recording")
