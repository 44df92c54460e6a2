"""Merged stacks in the formats other tools open (pure): folded text (Brendan Gregg's
flamegraph.pl, inferno), pprof (gzipped protobuf of google/pprof's profile.proto, for
`go tool pprof`), and speedscope's JSON file format.

pprof is hand-encoded: only the messages and fields a profile needs (ValueType, Sample,
Location with one Line, Function, the string table, times and period), written with a small
varint writer, so no protobuf dependency or generated code. Field numbers are profile.proto's.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Mapping
from typing import Any

from zerotrace_query.flame_graph import PROFILE_TYPES, THREAD_PREFIX, Stack

SPEEDSCOPE_SCHEMA_URL = "https://www.speedscope.app/file-format-schema.json"
# speedscope's units: its schema knows no "count", so counters say "none".
_SPEEDSCOPE_UNITS = {"count": "none", "nanoseconds": "nanoseconds", "bytes": "bytes"}
# 'py:<qualname> (<file>:<line>)' carries a file and line that pprof and speedscope show apart.
_PY_FRAME = re.compile(r"py:(?P<name>.*) \((?P<file>.*):(?P<line>\d+)\)")
_NATIVE_FRAME = re.compile(r"native:(?P<name>.*) \[(?P<file>[^\]]*)\]")


def frame_parts(frame: str) -> tuple[str, str, int]:
    """(name, file, line) of a frame; file '' and line 0 where the frame has none. The name
    keeps the kind prefix ('py:', 'native:', ...) so every view names a frame alike."""
    match = _PY_FRAME.fullmatch(frame)
    if match:
        return f"py:{match['name']}", match["file"], int(match["line"])
    match = _NATIVE_FRAME.fullmatch(frame)
    if match:
        return f"native:{match['name']}", match["file"], 0
    return frame, "", 0


def folded_text(stacks: Mapping[Stack, int]) -> str:
    """'frame;frame;frame weight' per line, sorted, for flamegraph.pl and friends."""
    lines = sorted(f"{';'.join(stack)} {weight}" for stack, weight in stacks.items() if weight)
    return "".join(line + "\n" for line in lines)


# --- pprof -----------------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64 negatives are ten-byte two's complement varints
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _int_field(number: int, value: int) -> bytes:
    """A varint field (wire type 0); zero is the default and is left out."""
    return _varint(number << 3) + _varint(value) if value else b""


def _bytes_field(number: int, data: bytes) -> bytes:
    """A length-delimited field (wire type 2): strings, messages, packed repeated ints."""
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _packed(number: int, values: list[int]) -> bytes:
    return _bytes_field(number, b"".join(_varint(v) for v in values)) if values else b""


class _Strings:
    """profile.proto's string table: index 0 is always ''."""

    def __init__(self) -> None:
        self.table: list[str] = [""]
        self._index: dict[str, int] = {"": 0}

    def __call__(self, text: str) -> int:
        if text not in self._index:
            self._index[text] = len(self.table)
            self.table.append(text)
        return self._index[text]


def pprof_bytes(
    stacks: Mapping[Stack, int],
    profile_type: str,
    time_ns: int = 0,
    duration_ns: int = 0,
    period: int = 0,
) -> bytes:
    """A gzipped profile.proto Profile: one sample type (e.g. samples/count, off_cpu/nanoseconds,
    inuse_space/bytes), one location and function per distinct frame, leaf first in each
    sample as pprof wants. `period` (e.g. ns between CPU samples) is optional."""
    sample_name, unit = PROFILE_TYPES[profile_type]
    strings = _Strings()
    value_type = _int_field(1, strings(sample_name)) + _int_field(2, strings(unit))
    location_ids: dict[str, int] = {}
    body = bytearray(_bytes_field(1, value_type))
    functions = bytearray()
    locations = bytearray()
    for stack, weight in sorted(stacks.items()):
        if not weight:
            continue
        ids = []
        for frame in stack:
            if frame not in location_ids:
                loc_id = location_ids[frame] = len(location_ids) + 1
                name, file, line = frame_parts(frame)
                function = (
                    _int_field(1, loc_id)
                    + _int_field(2, strings(name))
                    + _int_field(3, strings(frame))
                    + _int_field(4, strings(file))
                    + _int_field(5, line)
                )
                functions += _bytes_field(5, function)
                line_msg = _int_field(1, loc_id) + _int_field(2, line)
                locations += _bytes_field(4, _int_field(1, loc_id) + _bytes_field(4, line_msg))
            ids.append(location_ids[frame])
        sample = _packed(1, ids[::-1]) + _packed(2, [weight])
        body += _bytes_field(2, sample)
    body += locations + functions
    for text in strings.table:
        body += _bytes_field(6, text.encode())
    body += _int_field(9, time_ns) + _int_field(10, duration_ns)
    body += _bytes_field(11, value_type) + _int_field(12, period)
    return gzip.compress(bytes(body), mtime=0)


# --- speedscope ------------------------------------------------------------------------------


def speedscope_document(
    stacks: Mapping[Stack, int], profile_type: str, name: str, per_thread: bool = False
) -> dict[str, Any]:
    """A speedscope file: frames shared, one 'sampled' profile of weighted stacks, or one per
    thread when `per_thread` and the stacks start with 'thread:<tid>' (the thread frame then
    names the profile and leaves the stack)."""
    unit = _SPEEDSCOPE_UNITS[PROFILE_TYPES[profile_type][1]]
    frames: list[dict[str, Any]] = []
    frame_index: dict[str, int] = {}

    def index(frame: str) -> int:
        if frame not in frame_index:
            frame_index[frame] = len(frames)
            fname, file, line = frame_parts(frame)
            entry: dict[str, Any] = {"name": fname}
            if file:
                entry["file"] = file
            if line:
                entry["line"] = line
            frames.append(entry)
        return frame_index[frame]

    groups: dict[str, list[tuple[Stack, int]]] = {}
    for stack, weight in sorted(stacks.items()):
        if not weight:
            continue
        group = name
        if per_thread and stack and stack[0].startswith(THREAD_PREFIX):
            group, stack = stack[0], stack[1:]
        groups.setdefault(group, []).append((stack, weight))
    profiles = []
    for group in sorted(groups):
        samples = [[index(frame) for frame in stack] for stack, _ in groups[group]]
        weights = [weight for _, weight in groups[group]]
        profiles.append(
            {
                "type": "sampled",
                "name": group,
                "unit": unit,
                "startValue": 0,
                "endValue": sum(weights),
                "samples": samples,
                "weights": weights,
            }
        )
    return {
        "$schema": SPEEDSCOPE_SCHEMA_URL,
        "name": name,
        "exporter": "zerotrace",
        "activeProfileIndex": 0,
        "shared": {"frames": frames},
        "profiles": profiles,
    }


def speedscope_json(
    stacks: Mapping[Stack, int], profile_type: str, name: str, per_thread: bool = False
) -> str:
    return json.dumps(speedscope_document(stacks, profile_type, name, per_thread))
