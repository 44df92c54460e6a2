"""Merged stacks as folded text, pprof (checked by `go tool pprof` itself) and speedscope JSON
(checked against speedscope's own schema from its npm package)."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
from pathlib import Path

import jsonschema  # type: ignore[import-untyped]  # no stubs in the venv
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.profile_data import (
    NATIVE_CRC,
    PY_HOT,
    realistic_windows,
    speedscope_schema,
)
from zerotrace_query.flame_graph import PROFILE_TYPES, FlameFilter, merge_windows
from zerotrace_query.profile_formats import (
    _varint,
    folded_text,
    frame_parts,
    pprof_bytes,
    speedscope_document,
)

T0 = 1_700_000_000_000_000_000
WINDOWS = realistic_windows(T0, 3)
GO = shutil.which("go") or "/usr/local/go/bin/go"


def go_pprof(path: Path, *args: str) -> str:
    if not os.access(GO, os.X_OK):
        pytest.skip("Go is not installed (/usr/local/go/bin/go): `go tool pprof` checks pprof")
    env = {**os.environ, "GOTOOLCHAIN": "local", "PPROF_TMPDIR": str(path.parent)}
    done = subprocess.run(
        [GO, "tool", "pprof", *args, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_varint_matches_protobuf() -> None:
    assert _varint(1) == b"\x01"
    assert _varint(300) == b"\xac\x02"
    assert _varint(-1) == b"\xff" * 9 + b"\x01"


def test_frame_parts() -> None:
    assert frame_parts(PY_HOT) == ("py:hot_loop", "/srv/app/server.py", 9)
    assert frame_parts(NATIVE_CRC) == ("native:crc32_z", "libz.so.1", 0)
    assert frame_parts("kernel:schedule") == ("kernel:schedule", "", 0)


def test_folded_text_round_trips_the_stacks() -> None:
    merged = merge_windows(WINDOWS, FlameFilter("ON_CPU", node="node-a"))
    text = folded_text(merged.stacks)
    back = {}
    for line in text.splitlines():
        folded, weight = line.rsplit(" ", 1)
        back[tuple(folded.split(";"))] = int(weight)
    assert back == merged.stacks


def test_pprof_opens_in_go_tool_pprof(tmp_path: Path) -> None:
    merged = merge_windows(WINDOWS, FlameFilter("ON_CPU", node="node-a"))
    data = pprof_bytes(merged.stacks, "ON_CPU", T0, 30 * 10**9, period=10_101_010)
    assert gzip.decompress(data)  # a gzip stream, as pprof files are
    path = tmp_path / "cpu.pb.gz"
    path.write_bytes(data)
    raw = go_pprof(path, "-raw")
    assert "samples/count" in raw
    # Every stack comes back with its weight, leaf first in pprof's listing.
    top = go_pprof(path, "-top", "-nodecount=100")
    assert f"of {merged.total} total" in top.replace(",", "")
    flat = {}
    for line in top.splitlines():
        parts = line.split()
        if len(parts) >= 6 and parts[0].isdigit():
            flat[" ".join(parts[5:])] = int(parts[0])
    assert flat["py:hot_loop"] == 3 * 700
    assert flat["native:crc32_z"] == 3 * 90
    assert flat["native:libfoo.so+0x1a2b"] == 3 * 40


def test_pprof_units_per_profile_type(tmp_path: Path) -> None:
    for ptype, unit in (("OFF_CPU", "off_cpu/nanoseconds"), ("GPU_MEM_INUSE", "inuse_space/bytes")):
        merged = merge_windows(WINDOWS, FlameFilter(ptype, node="node-a"))
        path = tmp_path / f"{ptype}.pb.gz"
        path.write_bytes(pprof_bytes(merged.stacks, ptype))
        assert unit in go_pprof(path, "-raw")
        traces = go_pprof(path, "-traces")
        assert (
            "cuda:cudaMalloc" in traces if ptype == "GPU_MEM_INUSE" else "kernel:schedule" in traces
        )


def test_speedscope_validates_merged_and_per_thread() -> None:
    schema = speedscope_schema()
    merged = merge_windows(WINDOWS, FlameFilter("OFF_CPU", node="node-a"))
    doc = speedscope_document(merged.stacks, "OFF_CPU", "inference off-cpu")
    jsonschema.validate(doc, schema)
    assert [p["unit"] for p in doc["profiles"]] == ["nanoseconds"]
    assert doc["profiles"][0]["endValue"] == merged.total
    threads = merge_windows(WINDOWS, FlameFilter("ON_CPU", node="node-a", by_thread=True))
    per_thread = speedscope_document(threads.stacks, "ON_CPU", "cpu", per_thread=True)
    jsonschema.validate(per_thread, schema)
    assert [p["name"] for p in per_thread["profiles"]] == ["thread:101", "thread:102", "thread:103"]
    assert {p["unit"] for p in per_thread["profiles"]} == {"none"}
    frames = per_thread["shared"]["frames"]
    hot = next(f for f in frames if f["name"] == "py:hot_loop")
    assert hot == {"name": "py:hot_loop", "file": "/srv/app/server.py", "line": 9}
    # Every sample is a list of valid frame indices, root first.
    first = per_thread["profiles"][0]
    assert all(0 <= i < len(frames) for s in first["samples"] for i in s)
    assert frames[first["samples"][0][0]]["name"] == "py:<module>"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**doc, "profiles": [{"type": "sampled"}]}, schema)


# --- a reader of the few profile.proto fields written, to check the encoding independently --


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        if key & 7 == 0:
            value, pos = _read_varint(data, pos)
            out.append((key >> 3, value))
        else:
            assert key & 7 == 2, f"unexpected wire type {key & 7}"
            size, pos = _read_varint(data, pos)
            out.append((key >> 3, data[pos : pos + size]))
            pos += size
    return out


def _packed_ints(data: bytes) -> list[int]:
    values, pos = [], 0
    while pos < len(data):
        value, pos = _read_varint(data, pos)
        values.append(value)
    return values


def decode_pprof(blob: bytes) -> tuple[dict[tuple[str, ...], int], list[str]]:
    """(stack root first -> value, [sample type, unit]) from a gzipped Profile."""
    top = _fields(gzip.decompress(blob))
    strings = [bytes(v).decode() for n, v in top if n == 6 and isinstance(v, bytes)]
    functions = {}
    for n, v in top:
        if n == 5 and isinstance(v, bytes):
            f = dict(_fields(v))
            functions[f[1]] = strings[int(f.get(3, 0))]
    locations = {}
    for n, v in top:
        if n == 4 and isinstance(v, bytes):
            loc = _fields(v)
            line = dict(_fields(next(x for k, x in loc if k == 4)))  # type: ignore[arg-type]
            locations[dict(loc)[1]] = functions[line[1]]
    stacks: dict[tuple[str, ...], int] = {}
    for n, v in top:
        if n == 2 and isinstance(v, bytes):
            sample = dict(_fields(v))
            ids = _packed_ints(sample[1])  # type: ignore[arg-type]
            (value,) = _packed_ints(sample[2])  # type: ignore[arg-type]
            stack = tuple(locations[i] for i in reversed(ids))
            stacks[stack] = stacks.get(stack, 0) + value
    value_type = dict(_fields(next(v for n, v in top if n == 1)))  # type: ignore[arg-type]
    return stacks, [strings[int(value_type[1])], strings[int(value_type[2])]]


FRAME = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters=";"),
    min_size=1,
    max_size=12,
)


@given(
    st.dictionaries(
        st.lists(FRAME, min_size=1, max_size=8).map(tuple),
        st.integers(1, 2**62),
        max_size=20,
    ),
    st.sampled_from(sorted(PROFILE_TYPES)),
)
def test_pprof_decodes_back_to_the_same_stacks(
    stacks: dict[tuple[str, ...], int], profile_type: str
) -> None:
    decoded, sample_type = decode_pprof(pprof_bytes(stacks, profile_type))
    assert decoded == stacks
    assert sample_type == list(PROFILE_TYPES[profile_type])
