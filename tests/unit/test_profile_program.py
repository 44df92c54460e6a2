"""The profiler's program text and settings, without bcc or root."""

from __future__ import annotations

from pathlib import Path

import pytest

from zerotrace_collector.probes.profile import DEFAULT_RATE_HZ, ProfileProbe, program_text

pytestmark = pytest.mark.unit

BPF = Path(__file__).resolve().parents[2] / "bpf"


def test_program_text_is_the_walker_then_the_profiler_with_its_cflags() -> None:
    text = program_text(BPF, pids={1}, py_depth=16, off_cpu_min_ns=5_000_000)
    first = text.splitlines()[0]
    assert "-DZT_FOLLOW=1" in first and "-DZT_PY_MAX_DEPTH=16" in first
    assert "-DZT_OFFCPU_MIN_NS=5000000ULL" in first
    # bcc rewrites map accesses only in its main text: the walker is part of it, first.
    assert '#include "python_stack.h"' not in text
    assert text.index("zt_python_stack(u32 tgid") < text.index("int zt_profile_on_cpu(")


def test_defaults() -> None:
    probe = ProfileProbe(BPF)
    assert DEFAULT_RATE_HZ == 97 and probe.rate_hz == 97
    assert probe.off_cpu and probe.off_cpu_min_ns == 1_000_000 and probe.pids is None
    assert "-DZT_FOLLOW=0" in probe.cflags()


@pytest.mark.parametrize(
    "options",
    [
        {"rate_hz": -1},
        {"stack_depth": 24},
        {"ringbuf_pages": 3},
        {"py_depth": 0},
        {"off_cpu_threads": 0},
    ],
)
def test_bad_settings(options: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        ProfileProbe(BPF, **options)  # type: ignore[arg-type]
