"""Pure tests of the file-open event decoder (no bcc, no root)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerotrace_collector.errors import MalformedEvent
from zerotrace_collector.probes.event_layout import ZT_EVENT_FILE_OPEN, ZT_EVENT_FILE_RW, peek_type
from zerotrace_collector.probes.fileio_decode import (
    EVENT_SIZE,
    RW_STRUCT,
    FileOpenSample,
    FileRwSample,
    decode_file_event,
    decode_file_open,
)

pytestmark = pytest.mark.unit

U32 = st.integers(0, 2**32 - 1)
U64 = st.integers(0, 2**64 - 1)


def encode(
    *,
    type_tag: int = ZT_EVENT_FILE_OPEN,
    pid: int = 1234,
    tid: int = 1235,
    open_flags: int = os.O_RDONLY | os.O_CLOEXEC,
    cgroup_id: int = 42,
    start_ns: int = 1_000,
    end_ns: int = 2_500,
    ret: int = 3,
    comm: bytes = b"cat",
    path: bytes = b"/etc/hostname",
) -> bytes:
    """Test-only encoder, written independently from the decoder's Struct.

    Mirrors struct zt_file_open_event in bpf/zerotrace_events.h field by field.
    """
    assert len(comm) < 16 and len(path) < 256
    out = b"".join(
        [
            type_tag.to_bytes(4, "little"),
            pid.to_bytes(4, "little"),
            tid.to_bytes(4, "little"),
            open_flags.to_bytes(4, "little", signed=True),
            cgroup_id.to_bytes(8, "little"),
            start_ns.to_bytes(8, "little"),
            end_ns.to_bytes(8, "little"),
            ret.to_bytes(8, "little", signed=True),
            comm.ljust(16, b"\0"),
            path.ljust(256, b"\0"),
        ]
    )
    assert len(out) == 320
    return out


def test_layout_size_matches_header() -> None:
    assert EVENT_SIZE == 320


def test_decodes_a_typical_event() -> None:
    s = decode_file_open(encode())
    assert s == FileOpenSample(
        pid=1234,
        tid=1235,
        cgroup_id=42,
        start_mono_ns=1_000,
        end_mono_ns=2_500,
        ret=3,
        flags=os.O_RDONLY | os.O_CLOEXEC,
        comm="cat",
        path="/etc/hostname",
    )
    assert s.duration_ns == 1_500
    assert s.ok


def test_negative_errno_and_flags() -> None:
    s = decode_file_open(encode(ret=-2, open_flags=-1))
    assert s.ret == -2
    assert not s.ok
    assert s.flags == -1


def test_accepts_bytearray_memoryview_and_perf_padding() -> None:
    raw = encode()
    assert decode_file_open(bytearray(raw)) == decode_file_open(raw)
    assert decode_file_open(memoryview(raw)) == decode_file_open(raw)
    # perf buffers pad raw samples to 8 bytes (320 + 4 here)
    assert decode_file_open(raw + b"\0" * 4) == decode_file_open(raw)


def test_garbage_after_nul_is_ignored() -> None:
    raw = bytearray(encode(comm=b"sh", path=b"/a"))
    raw[48 + 3 : 48 + 16] = b"X" * 13  # junk after comm's NUL
    raw[64 + 3 : 64 + 256] = b"Y" * 253  # junk after path's NUL
    s = decode_file_open(bytes(raw))
    assert (s.comm, s.path) == ("sh", "/a")


def test_non_utf8_bytes_become_utf8_safe_escapes() -> None:
    s = decode_file_open(encode(comm=b"w\xe9rk", path=b"/tmp/\xff\xfe-\xc3\xa9"))
    assert s.path == "/tmp/\\xff\\xfe-\u00e9"
    assert s.comm == "w\\xe9rk"
    s.path.encode("utf-8")  # never raises: safe for Avro/JSON


def test_sample_is_frozen() -> None:
    s = decode_file_open(encode())
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.pid = 1  # type: ignore[misc]


@pytest.mark.parametrize("size", [0, 1, 3, 4, 64, EVENT_SIZE - 1])
def test_short_buffers_are_malformed(size: int) -> None:
    with pytest.raises(MalformedEvent, match="too short"):
        decode_file_open(encode()[:size])


def test_oversized_buffer_is_malformed() -> None:
    with pytest.raises(MalformedEvent, match="too long"):
        decode_file_open(encode() + b"\0" * 8)


@pytest.mark.parametrize("tag", [0, 2, 0xFFFFFFFF])
def test_wrong_type_tag_is_malformed(tag: int) -> None:
    with pytest.raises(MalformedEvent, match="type tag"):
        decode_file_open(encode(type_tag=tag))


def test_unterminated_strings_are_malformed() -> None:
    raw = bytearray(encode())
    raw[64:320] = b"A" * 256
    with pytest.raises(MalformedEvent, match="path"):
        decode_file_open(bytes(raw))
    raw = bytearray(encode())
    raw[48:64] = b"B" * 16
    with pytest.raises(MalformedEvent, match="comm"):
        decode_file_open(bytes(raw))


def test_end_before_start_is_malformed() -> None:
    with pytest.raises(MalformedEvent, match="precedes"):
        decode_file_open(encode(start_ns=10, end_ns=9))


def test_malformed_is_a_value_error() -> None:
    assert issubclass(MalformedEvent, ValueError)


def test_peek_type() -> None:
    assert peek_type(encode()) == ZT_EVENT_FILE_OPEN
    assert peek_type(struct.pack("<I", 7)) == 7
    with pytest.raises(MalformedEvent):
        peek_type(b"\x01\x00")


@given(garbage=st.binary(max_size=2 * EVENT_SIZE))
def test_random_bytes_never_raise_anything_but_malformed(garbage: bytes) -> None:
    with contextlib.suppress(MalformedEvent):
        decode_file_open(garbage)


_cstring = st.binary(max_size=255).map(lambda b: b.replace(b"\0", b""))


@given(
    pid=U32,
    tid=U32,
    open_flags=st.integers(-(2**31), 2**31 - 1),
    cgroup_id=U64,
    start_ns=U64,
    duration=U64,
    ret=st.integers(-(2**63), 2**63 - 1),
    comm=st.text(max_size=15).map(lambda t: t.replace("\0", "").encode()[:15]),
    path=_cstring,
)
def test_encode_decode_round_trip(
    pid: int,
    tid: int,
    open_flags: int,
    cgroup_id: int,
    start_ns: int,
    duration: int,
    ret: int,
    comm: bytes,
    path: bytes,
) -> None:
    end_ns = min(start_ns + duration, 2**64 - 1)
    raw = encode(
        pid=pid,
        tid=tid,
        open_flags=open_flags,
        cgroup_id=cgroup_id,
        start_ns=start_ns,
        end_ns=end_ns,
        ret=ret,
        comm=comm,
        path=path,
    )
    s = decode_file_open(raw)
    assert (s.pid, s.tid, s.flags, s.cgroup_id) == (pid, tid, open_flags, cgroup_id)
    assert (s.start_mono_ns, s.end_mono_ns, s.ret) == (start_ns, end_ns, ret)
    assert s.path == path.decode("utf-8", "backslashreplace")
    assert s.comm == comm.decode("utf-8", "backslashreplace")
    s.path.encode("utf-8")
    s.comm.encode("utf-8")


# ---- zt_file_rw_event (ZT_FILE_RW) --------------------------------------------------------


def encode_rw(op: int = 1, ret: int = 4096, start_ns: int = 10, end_ns: int = 25) -> bytes:
    return RW_STRUCT.pack(
        ZT_EVENT_FILE_RW, 7, 8, 5, 1, start_ns, end_ns, ret, op, 0, b"srv\0", b"/m/w.bin\0"
    )


def test_rw_events_decode_by_their_tag() -> None:
    s = decode_file_event(encode_rw())
    assert s == FileRwSample(
        pid=7,
        tid=8,
        fd=5,
        cgroup_id=1,
        start_mono_ns=10,
        end_mono_ns=25,
        ret=4096,
        op="READ",
        comm="srv",
        path="/m/w.bin",
    )
    assert s.duration_ns == 15
    write = decode_file_event(encode_rw(op=2, ret=-5))
    assert isinstance(write, FileRwSample) and write.op == "WRITE"
    assert isinstance(decode_file_event(encode()), FileOpenSample)


@pytest.mark.parametrize(
    "raw",
    [
        encode_rw(op=3),
        encode_rw(start_ns=30, end_ns=20),
        encode_rw()[:-1],
        encode_rw() + b"\0" * 8,
        encode_rw()[:72] + b"x" * 256,  # path not NUL-terminated
    ],
)
def test_bad_rw_events_are_refused(raw: bytes) -> None:
    with pytest.raises(MalformedEvent):
        decode_file_event(raw)
