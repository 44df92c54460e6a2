import os
import threading

import pytest

from zerotrace.cpu_priority import current_policy, set_cpu_priority


def test_idle_reaches_every_thread_and_normal_restores_it() -> None:
    started, release = threading.Event(), threading.Event()
    seen: list[str] = []

    def worker() -> None:
        started.set()
        release.wait(5)
        seen.append(current_policy())

    thread = threading.Thread(target=worker)
    thread.start()
    started.wait(5)
    try:
        assert set_cpu_priority("idle") >= 2
        assert current_policy() == "idle"
    finally:
        release.set()
        thread.join(5)
        set_cpu_priority("normal")
    assert seen == ["idle"] and current_policy() == "normal"
    assert os.sched_getscheduler(0) == os.SCHED_OTHER


def test_an_unknown_policy_is_one_clear_error() -> None:
    with pytest.raises(ValueError, match="idle, normal"):
        set_cpu_priority("realtime")
