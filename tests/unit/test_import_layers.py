"""The layers of ARCHITECTURE.md, as import-linter contracts (pyproject.toml) that the test
command runs: they hold for the tree, and one forbidden import in a copy of it breaks them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PACKAGE_DIRS = {
    "zerotrace": "lib",
    "zerotrace_cli": "cli",
    "zerotrace_collector": "services/collector",
    "zerotrace_correlator": "services/correlator",
    "zerotrace_profiler_agg": "services/profiler-agg",
    "zerotrace_query": "services/query",
}


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    paths = [str(root / folder) for folder in PACKAGE_DIRS.values()]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(root / "pyproject.toml")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def copy_tree(tmp: Path) -> Path:
    for package, folder in PACKAGE_DIRS.items():
        shutil.copytree(
            ROOT / folder / package,
            tmp / folder / package,
            ignore=shutil.ignore_patterns("__pycache__", "web"),
        )
    shutil.copy(ROOT / "pyproject.toml", tmp / "pyproject.toml")
    return tmp


def plant(root: Path, module: str, line: str) -> None:
    package, _, rest = module.partition(".")
    path = root / PACKAGE_DIRS[package] / package / (rest.replace(".", "/") + ".py")
    path.write_text(path.read_text() + f"\n{line}\n")


def test_the_tree_keeps_every_contract() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("zerotrace.codec", "import zerotrace_correlator.pipeline", "composition root above"),
        ("zerotrace_correlator.pipeline", "import zerotrace_query.documents", "above the"),
        ("zerotrace_correlator.http1", "import faust", "pure logic imports no I/O"),
        ("zerotrace_query.documents", "import opensearchpy", "pure logic imports no I/O"),
    ],
)
def test_one_forbidden_import_breaks_a_contract(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    root = copy_tree(tmp_path)
    plant(root, module, line)
    result = lint_imports(root)
    assert result.returncode == 1, result.stdout + result.stderr
    broken = [ln for ln in result.stdout.splitlines() if ln.endswith("BROKEN")]
    assert len(broken) == 1 and contract in broken[0], result.stdout
