"""--cpu-budget: the option wins over the setting, the setting over the default, and a host
that cannot hold a budget is told in one line (the kernel side: tests/kernel/
test_cpu_budget_cgroup.py)."""

from __future__ import annotations

import argparse

import pytest

from zerotrace import settings
from zerotrace.cpu_budget import CpuBudget
from zerotrace.errors import ConfigError
from zerotrace_cli import budget_args

pytestmark = pytest.mark.unit


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    budget_args.add_budget_argument(p)
    return p.parse_args(list(argv))


@pytest.mark.parametrize(
    ("argv", "env", "cores"),
    [((), {}, 0.5), ((), {"ZEROTRACE_CPU_BUDGET": "2"}, 2.0), (("--cpu-budget", "0"), {}, 0.0)],
)
def test_the_option_then_the_setting_then_half_a_core(
    argv: tuple[str, ...],
    env: dict[str, str],
    cores: float,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    asked: list[float] = []

    def apply(c: float) -> CpuBudget:
        asked.append(c)
        return CpuBudget(c, None, f"CPU budget {c:g} core not enforced (test)")

    monkeypatch.setattr(budget_args, "apply_cpu_budget", apply)
    common = settings.load(settings.CommonSettings, env)
    budget = budget_args.hold_budget(parse(*argv), common)
    assert (asked, budget.cores) == ([cores], cores)
    assert capsys.readouterr().err == f"zerotrace: CPU budget {cores:g} core not enforced (test)\n"


def test_a_budget_is_a_number_of_cores(capsys: pytest.CaptureFixture[str]) -> None:
    for wrong in ("-0.5", "lots", "nan"):
        with pytest.raises(SystemExit):
            parse("--cpu-budget", wrong)
    assert "a number of cores >= 0, like 0.5, not 'lots'" in capsys.readouterr().err


def test_a_bad_setting_is_one_clear_error_not_a_traceback() -> None:
    for wrong in ("-1", "inf", "nan"):
        common = settings.load(settings.CommonSettings, {"ZEROTRACE_CPU_BUDGET": wrong})
        with pytest.raises(ConfigError, match=r"^ZEROTRACE_CPU_BUDGET: a number of cores >= 0"):
            budget_args.hold_budget(parse(), common)
