"""Pure tests of the profile event decoder (no bcc, no root)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerotrace_collector.errors import MalformedEvent
from zerotrace_collector.probes.event_layout import ZT_EVENT_OFF_CPU as EVENT_OFF_CPU
from zerotrace_collector.probes.event_layout import ZT_EVENT_ON_CPU as EVENT_ON_CPU
from zerotrace_collector.probes.event_layout import PyStatus
from zerotrace_collector.probes.profile_decode import ProfileLayout

pytestmark = pytest.mark.unit

LAYOUT = ProfileLayout(stack_depth=4, py_depth=3)
U64 = st.integers(1, 2**64 - 1)


def encode(
    *,
    kind: int = EVENT_ON_CPU,
    kernel: list[int] | None = None,
    user: list[int] | None = None,
    kbytes: int | None = None,
    ubytes: int | None = None,
    status: int = 1,
    py: list[tuple[int, int]] | None = None,
    truncated: int = 0,
    weight: int = 1,
    layout: ProfileLayout = LAYOUT,
) -> bytes:
    kernel, user, py = kernel or [], user or [], py or []
    n, m = layout.stack_depth, layout.py_depth
    head = struct.pack(
        "<IIIiiIQQ16s",
        kind,
        100,
        101,
        8 * len(kernel) if kbytes is None else kbytes,
        8 * len(user) if ubytes is None else ubytes,
        0,
        123_456,
        weight,
        b"python3.11\0garbage",
    )
    stacks = struct.pack(
        f"<{2 * n}Q", *(kernel + [0] * (n - len(kernel))), *(user + [0] * (n - len(user)))
    )
    codes = [c for c, _ in py] + [0] * (m - len(py))
    instrs = [i for _, i in py] + [0] * (m - len(py))
    tail = struct.pack("<IIII", status, len(py), truncated, 0) + struct.pack(
        f"<{2 * m}Q", *codes, *instrs
    )
    return head + stacks + tail


def test_size_follows_the_compiled_depths() -> None:
    assert ProfileLayout().size == 56 + 16 * 32 + 16 + 16 * 48
    assert len(encode()) == LAYOUT.size


@given(
    kernel=st.lists(U64, max_size=4),
    user=st.lists(U64, max_size=4),
    py=st.lists(st.tuples(st.integers(0, 2**64 - 1), U64), max_size=3),
    off=st.booleans(),
    weight=st.integers(0, 2**63),
)
def test_round_trip(
    kernel: list[int], user: list[int], py: list[tuple[int, int]], off: bool, weight: int
) -> None:
    kind = EVENT_OFF_CPU if off else EVENT_ON_CPU
    s = LAYOUT.decode(encode(kind=kind, kernel=kernel, user=user, py=py, weight=weight))
    assert (s.off_cpu, s.pid, s.tid, s.comm, s.ts_mono_ns, s.weight) == (
        off,
        100,
        101,
        "python3.11",
        123_456,
        weight,
    )
    assert s.kernel_stack == tuple(kernel) and s.user_stack == tuple(user)
    assert s.py_frames == tuple(py) and s.py_status is PyStatus.OK


def test_stack_errors_give_empty_stacks() -> None:
    s = LAYOUT.decode(encode(kernel=[1, 2], kbytes=-14, user=[3], ubytes=-2))
    assert s.kernel_stack == () and s.kernel_error and s.user_stack == () and s.user_error


def test_status_and_truncation() -> None:
    s = LAYOUT.decode(encode(status=3, py=[(5, 6)], truncated=1))
    assert s.py_status is PyStatus.READ_FAIL and s.py_frames == ((5, 6),) and s.py_truncated


@pytest.mark.parametrize("raw", [b"", encode()[:-1], encode(kind=1), encode(status=9)])
def test_malformed(raw: bytes) -> None:
    with pytest.raises(MalformedEvent):
        LAYOUT.decode(raw)


def test_depth_beyond_the_layout_is_malformed() -> None:
    raw = bytearray(encode(py=[(1, 1)]))
    struct.pack_into("<I", raw, 56 + 16 * 4 + 4, 4)  # depth 4 > py_depth 3
    with pytest.raises(MalformedEvent):
        LAYOUT.decode(bytes(raw))
