"""Which processes the context-copy uretprobe goes into (probes/socket.py context_probe_pid)."""

from __future__ import annotations

import pytest

from zerotrace_collector.probes.socket import context_probe_pid

pytestmark = pytest.mark.unit


def test_the_one_process_asked_for_is_probed_whatever_the_mode() -> None:
    assert context_probe_pid(pid_filter=42, follow=True, pid=42) == 42
    assert context_probe_pid(pid_filter=42, follow=False, pid=42) == 42


def test_followed_processes_are_probed_one_by_one() -> None:
    assert context_probe_pid(pid_filter=None, follow=True, pid=7) == 7
    assert context_probe_pid(pid_filter=0, follow=True, pid=8) == 8


def test_a_host_wide_collector_probes_every_process_of_the_module() -> None:
    assert context_probe_pid(pid_filter=None, follow=False, pid=7) == -1
