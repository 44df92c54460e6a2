"""What every bcc probe shares (zerotrace_collector/probes/bcc_loader.py), without compiling a
program: bcc's many-line errors cut to their first line, the checks that say in one line why
a probe cannot run here, the C text read from bpf/ and annotated with its cflags, and the
probe base class. Compiling and attaching for real is the kernel tests' (for instance
tests/kernel/test_symbolizer_stacks.py)."""

from __future__ import annotations

import threading
import types
from pathlib import Path
from typing import Any, ClassVar

import pytest

from zerotrace_collector.errors import ProbeUnavailable
from zerotrace_collector.probes import bcc_loader
from zerotrace_collector.probes.bcc_loader import (
    AttachedProbe,
    annotated,
    compile_program,
    first_line,
    read_program,
    release,
    tell_thread_states,
)

pytestmark = pytest.mark.unit


def test_first_line_of_a_compiler_error() -> None:
    error = Exception("\n  /virtual/main.c:12:5: error: use of undeclared 'x'\n  x = 1;\n")
    assert first_line(error) == "/virtual/main.c:12:5: error: use of undeclared 'x'"
    assert first_line(Exception("y" * 500), limit=10) == "y" * 10
    assert first_line(KeyError()) == "KeyError"  # nothing said: the type says it


def test_a_program_that_does_not_load_is_one_line(tmp_path: Path) -> None:
    class Refusing:
        def __init__(self, text: bytes, cflags: list[str]) -> None:
            raise Exception("bpf: Failed to load program: Permission denied\nverifier log...")

    with pytest.raises(ProbeUnavailable) as caught:
        compile_program(Refusing, "int x;", [], tmp_path / "demo.c")
    assert str(caught.value) == (
        f"loading {tmp_path / 'demo.c'} failed: bpf: Failed to load program: Permission denied"
    )
    loaded = compile_program(lambda text, cflags: (text, cflags), "int y;", ["-DA=1"], tmp_path)
    assert loaded == (b"int y;", ["-DA=1"])


def test_not_root_or_no_bcc_is_one_line_each(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bcc_loader, "os", types.SimpleNamespace(geteuid=lambda: 1000))
    with pytest.raises(ProbeUnavailable, match=r"^file opens needs root \(running as uid 1000\)$"):
        bcc_loader.bcc_for("file opens", [])

    def no_bcc(name: str) -> Any:
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr(bcc_loader, "os", types.SimpleNamespace(geteuid=lambda: 0))
    monkeypatch.setattr(bcc_loader, "importlib", types.SimpleNamespace(import_module=no_bcc))
    with pytest.raises(ProbeUnavailable, match=r"bcc is not importable .*setup-ebpf\.sh"):
        bcc_loader.bcc_for("file opens", [])


def test_shared_parts_are_joined_in_order(tmp_path: Path) -> None:
    (tmp_path / "main.c").write_text("int main_part;\n")
    (tmp_path / "tls.c").write_text("int tls_part;\n")
    assert read_program(tmp_path, "main.c", "tls.c") == (
        "int main_part;\n\n/* ---- tls.c ---- */\nint tls_part;\n"
    )
    with pytest.raises(ProbeUnavailable, match=r"cannot read BPF program .*nosuch\.c"):
        read_program(tmp_path, "main.c", "nosuch.c")


def test_the_program_text_starts_with_its_cflags(tmp_path: Path) -> None:
    assert annotated(["-DA=1", "-DB=2"], "int x;") == "/* bcc cflags: -DA=1 -DB=2 */\nint x;"

    class Demo(AttachedProbe):
        program_file: ClassVar[str] = "demo.c"

        def __init__(self) -> None:
            self.bpf_dir = tmp_path
            self._bpf = None

        def cflags(self) -> list[str]:
            return ["-DZT_DEMO=1"]

    (tmp_path / "demo.c").write_text("int demo;")
    probe = Demo()
    assert probe.source_path == tmp_path / "demo.c" and not probe.attached
    assert probe.program_text() == "/* bcc cflags: -DZT_DEMO=1 */\nint demo;"
    with pytest.raises(NotImplementedError):
        probe.attach()


def test_thread_states_go_into_the_map_by_tid() -> None:
    class Table(dict[Any, Any]):
        """A BPF hash map as bcc shows it: keyed and valued by its ctypes types."""

        Key = staticmethod(lambda v: ("key", v))
        Leaf = staticmethod(lambda v: ("leaf", v))

    table = Table()
    tell_thread_states(table, {11: 0x7F00, 12: 0x7F80})
    assert table == {("key", 11): ("leaf", 0x7F00), ("key", 12): ("leaf", 0x7F80)}


def test_a_tracepoint_is_looked_for_under_either_tracefs_mount(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tracing, debug = tmp_path / "tracing", tmp_path / "debug" / "tracing"
    monkeypatch.setattr(bcc_loader, "TRACEFS_ROOTS", (tracing, debug))
    assert not bcc_loader.tracepoint_exists("tcp", "tcp_probe")
    (debug / "events" / "tcp" / "tcp_probe").mkdir(parents=True)
    assert bcc_loader.tracepoint_exists("tcp", "tcp_probe")
    assert not bcc_loader.tracepoint_exists("tcp", "tcp_retransmit_skb")


class _SlowDetachBpf:
    """bcc's BPF as `release` uses it: each detach blocks (as the kernel's grace period does,
    outside the GIL) and one of them fails."""

    def __init__(self, wait: threading.Barrier) -> None:
        self.tracepoint_fds = {b"syscalls:sys_exit_read": 3, b"syscalls:sys_exit_write": 4}
        self.uprobe_fds = {b"p_libssl_SSL_read": 5, b"p_libssl_SSL_write": 6}
        self.detached: list[bytes] = []
        self.cleaned_after: list[bytes] | None = None
        self._wait = wait

    def detach_tracepoint(self, tp: bytes) -> None:
        self._wait.wait()  # returns only once all four detaches run at the same time
        if tp.endswith(b"write"):
            raise RuntimeError("Failed to detach BPF from tracepoint")
        del self.tracepoint_fds[tp]
        self.detached.append(tp)

    def detach_uprobe_event(self, ev: bytes) -> None:
        self._wait.wait()
        del self.uprobe_fds[ev]
        self.detached.append(ev)

    def cleanup(self) -> None:
        self.cleaned_after = sorted(self.detached)


def test_release_detaches_side_by_side_then_cleans_up() -> None:
    bpf = _SlowDetachBpf(threading.Barrier(4, timeout=10))
    release(bpf)
    assert bpf.cleaned_after == sorted(
        [b"syscalls:sys_exit_read", b"p_libssl_SSL_read", b"p_libssl_SSL_write"]
    )
    # The one that failed is left to bcc's own cleanup, which tries it again.
    assert bpf.tracepoint_fds == {b"syscalls:sys_exit_write": 4}
