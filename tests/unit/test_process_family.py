from __future__ import annotations

from pathlib import Path

from zerotrace_collector.process_family import ProcessFamily, ppid_from_stat


def test_ppid_survives_odd_command_names() -> None:
    assert ppid_from_stat("42 (my (odd) cmd) S 7 42 42 0 -1") == 7


def fake_proc(tmp_path: Path, parents: dict[int, int]) -> Path:
    for pid, ppid in parents.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (python3) S {ppid} 1 1 0")
    return tmp_path


def test_descendants_are_members_strangers_are_not(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, {10: 1, 11: 10, 12: 11, 20: 1})
    family = ProcessFamily(10, proc)
    assert family.contains(12) and family.contains(11)
    assert not family.contains(20)
    assert not family.contains(99)  # gone before we looked
