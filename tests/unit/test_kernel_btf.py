"""The BTF reader on blobs written here type by type, and on the running kernel's BTF."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from zerotrace_collector.probes import socket_kernel
from zerotrace_collector.probes.kernel_btf import VMLINUX, BtfError, KernelBtf
from zerotrace_collector.probes.python_stack import python_stack_cflags
from zerotrace_collector.probes.socket_kernel import (
    TCP_ARRIVAL_MEMBERS,
    TCP_SEQ_MEMBERS,
    port_filter_cflags,
    set_state_cflags,
    tcp_arrival_cflags,
    tcp_seq_cflags,
)

INT, PTR, STRUCT, UNION, ENUM, FUNC_PROTO = 1, 2, 4, 5, 6, 13


class Blob:
    """A minimal BTF writer: types in order (ids from 1), names in a string section."""

    def __init__(self) -> None:
        self.strings = bytearray(b"\0")
        self.types = bytearray()
        self.count = 0

    def name(self, text: str) -> int:
        if not text:
            return 0
        at = len(self.strings)
        self.strings += text.encode() + b"\0"
        return at

    def add(self, kind: int, name: str, vlen: int, size: int, extra: bytes, flag: int = 0) -> int:
        info = (flag << 31) | (kind << 24) | vlen
        self.types += struct.pack("<III", self.name(name), info, size) + extra
        self.count += 1
        return self.count

    def int_type(self, name: str = "int") -> int:
        return self.add(INT, name, 0, 4, struct.pack("<I", 32))

    def composite(
        self, kind: int, name: str, members: list[tuple[str, int, int]], flag: int = 0
    ) -> int:
        extra = b"".join(struct.pack("<III", self.name(n), t, off) for n, t, off in members)
        return self.add(kind, name, len(members), 64, extra, flag)

    def bytes(self) -> bytes:
        header = struct.pack(
            "<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(self.types), len(self.types), len(self.strings)
        )
        return header + bytes(self.types) + bytes(self.strings)


def test_members_direct_and_inside_anonymous_unions() -> None:
    b = Blob()
    i = b.int_type()
    b.add(PTR, "", 0, i, b"")  # kinds without extra bytes between the ones read
    b.add(ENUM, "colour", 2, 4, struct.pack("<iIiI", b.name("RED"), 0, b.name("BLUE"), 1)[:16])
    b.add(FUNC_PROTO, "", 1, i, struct.pack("<II", 0, i))
    inner = b.composite(UNION, "", [("write_seq", i, 0), ("other", i, 0)])
    b.composite(STRUCT, "tcp_sock", [("head", i, 0), ("", inner, 96 * 8), ("copied_seq", i, 800)])
    btf = KernelBtf(b.bytes())
    assert btf.member_offset("tcp_sock", "copied_seq") == 100
    assert btf.member_offset("tcp_sock", "write_seq") == 96


def test_a_dotted_path_goes_through_nested_structs() -> None:
    b = Blob()
    i = b.int_type()
    thread = b.composite(STRUCT, "thread_struct", [("sp", i, 0), ("fsbase", i, 40 * 8)])
    b.composite(STRUCT, "task_struct", [("pid", i, 0), ("thread", thread, 3088 * 8)])
    btf = KernelBtf(b.bytes())
    assert btf.member_offset("task_struct", "thread.fsbase") == 3128
    with pytest.raises(BtfError, match=r"struct task_struct\.thread has no member gsbase"):
        btf.member_offset("task_struct", "thread.gsbase")
    with pytest.raises(BtfError, match=r"struct task_struct\.pid has no member x"):
        btf.member_offset("task_struct", "pid.x")  # an int: nothing inside


def test_bitfield_offsets_under_kind_flag() -> None:
    b = Blob()
    i = b.int_type()
    # kind_flag: the top 8 bits of a member's offset are its bitfield size.
    b.composite(STRUCT, "flags", [("a", i, (3 << 24) | 0), ("b", i, (0 << 24) | 64)], flag=1)
    btf = KernelBtf(b.bytes())
    assert btf.member_offset("flags", "b") == 8
    with pytest.raises(BtfError, match="no member c"):
        btf.member_offset("flags", "c")


def test_missing_struct_and_bad_blobs_say_what_is_wrong() -> None:
    b = Blob()
    b.int_type()
    with pytest.raises(BtfError, match="no struct task_struct"):
        KernelBtf(b.bytes()).member_offset("task_struct", "files")
    with pytest.raises(BtfError, match="not BTF"):
        KernelBtf(b"\0" * 40)
    with pytest.raises(BtfError, match="too short"):
        KernelBtf(b"\x9f\xeb")
    blob = b.bytes()
    with pytest.raises(BtfError, match="past the end"):
        KernelBtf(blob[:-4])
    with pytest.raises(BtfError, match="cannot read"):
        KernelBtf.running_kernel(Path("/nonexistent/btf"))


def test_tcp_seq_flags_without_btf_are_empty_with_a_reason(tmp_path: Path) -> None:
    flags, note = tcp_seq_cflags(tmp_path / "none")
    assert flags == [] and note is not None and note.startswith("tcp_seq off: cannot read")


def test_unread_arrivals_are_followed_only_where_tcp_probe_and_btf_are(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(socket_kernel, "tracepoint_exists", lambda category, event: False)
    flags, note = tcp_arrival_cflags()
    assert flags == [] and note is not None and "tcp:tcp_probe" in note
    monkeypatch.setattr(socket_kernel, "tracepoint_exists", lambda category, event: True)
    flags, note = tcp_arrival_cflags(tmp_path / "none")
    assert flags == [] and note is not None and note.startswith("cannot read")
    if VMLINUX.exists():
        flags, note = tcp_arrival_cflags()
        assert note is None and flags[0] == "-DZT_HAVE_TCP_PROBE=1"
        assert [f.split("=")[0] for f in flags[1:]] == [f"-D{m}" for m, _, _ in TCP_ARRIVAL_MEMBERS]


def test_non_blocking_connects_are_followed_only_where_set_state_and_btf_are(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """socket.c "Non-blocking connects": one line, no flag, where either is missing."""
    monkeypatch.setattr(socket_kernel, "tracepoint_exists", lambda category, event: False)
    flags, note = set_state_cflags()
    assert flags == [] and note is not None and "sock:inet_sock_set_state" in note
    monkeypatch.setattr(socket_kernel, "tracepoint_exists", lambda category, event: True)
    flags, note = set_state_cflags(tmp_path / "none")
    assert flags == [] and note is not None and note.startswith("cannot read")
    assert "non-blocking connect" in note
    if VMLINUX.exists():
        assert set_state_cflags() == (["-DZT_HAVE_SET_STATE=1"], None)


@pytest.mark.skipif(not VMLINUX.exists(), reason="this kernel publishes no BTF")
def test_the_running_kernel_has_every_member_the_socket_probe_reads() -> None:
    flags, note = tcp_seq_cflags()
    assert note is None
    assert [f.split("=")[0] for f in flags] == [f"-D{m}" for m, _, _ in TCP_SEQ_MEMBERS]
    offsets = dict(f[2:].split("=") for f in flags)
    # Landmarks that hold on every kernel: the first member is at 0, pointers are aligned.
    assert offsets["ZT_OFF_FDT_MAX_FDS"] == "0"
    assert all(int(v) % 4 == 0 for v in offsets.values())


def test_the_port_filter_goes_in_the_kernel_where_btf_tells_the_ports(tmp_path: Path) -> None:
    assert port_filter_cflags([]) == ([], None)
    flags, note = port_filter_cflags([8000], tmp_path / "none")
    assert flags == [] and note is not None and note.startswith("port filter in user space")
    if VMLINUX.exists():
        flags, note = port_filter_cflags([8443, 8000, 8000])
        assert note is None
        assert flags[0] == "-DZT_FILTER_PORTS=8000,8443"
        assert [f.split("=")[0] for f in flags[1:]] == ["-DZT_OFF_SKC_NUM", "-DZT_OFF_SKC_DPORT"]


def test_python_stack_flags_without_btf_say_what_is_lost(tmp_path: Path) -> None:
    flags, note = python_stack_cflags(tmp_path / "none")
    assert flags == [] and note is not None
    assert note.startswith("CPython 3.10 stacks without Python frames: cannot read")


@pytest.mark.skipif(not VMLINUX.exists(), reason="this kernel publishes no BTF")
def test_python_stack_flags_point_at_the_fs_base_of_a_task() -> None:
    flags, note = python_stack_cflags()
    assert note is None and len(flags) == 1 and flags[0].startswith("-DZT_OFF_TASK_FSBASE=")
    btf = KernelBtf.running_kernel()
    # Deep inside task_struct (thread is its last member), past the thread's own fields.
    assert int(flags[0].split("=")[1]) > btf.member_offset("task_struct", "thread")
