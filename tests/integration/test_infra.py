"""`zerotrace infra`: clear one-line failures, idempotent start, repair of stale state.

Runs the CLI as a person would, on other ports and another home than the suite's servers."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def zerotrace(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "zerotrace_cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def one_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, text
    return lines[0]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "ZEROTRACE_HOME": str(tmp_path),
        "ZEROTRACE_KAFKA_PORT": "19192",
        "ZEROTRACE_OPENSEARCH_PORT": "19200",
    }


def test_port_taken_is_one_clear_line(env: dict[str, str]) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        for only, var in (
            ("kafka", "ZEROTRACE_KAFKA_PORT"),
            ("opensearch", "ZEROTRACE_OPENSEARCH_PORT"),
        ):
            result = zerotrace("infra", "up", "--only", only, env={**env, var: str(port)})
            assert result.returncode != 0
            line = one_line(result.stderr)
            assert f"port 127.0.0.1:{port} is already taken" in line


def test_java_missing_is_one_clear_line(env: dict[str, str], tmp_path: Path) -> None:
    bare = tmp_path / "bin"
    bare.mkdir()
    result = zerotrace("infra", "up", env={**env, "PATH": str(bare)})
    assert result.returncode != 0
    assert "`java` is not on PATH" in one_line(result.stderr)


def test_up_is_idempotent_and_repairs_stale_state(env: dict[str, str], tmp_path: Path) -> None:
    folder = tmp_path / "infra" / "kafka"
    (folder / "data").mkdir(parents=True)  # a format that died half way: no meta.properties
    (folder / "kafka.pid").write_text("999999\n")  # a pid file of a process long gone
    # Reuse the suite's resolved jars when there are some: the copy is what a second run does.
    suite_lib = REPO / ".zerotrace" / "infra" / "lib" / "kafka"
    if suite_lib.exists():
        shutil.copytree(suite_lib, tmp_path / "infra" / "lib" / "kafka")
    try:
        first = zerotrace("infra", "up", "--only", "kafka", env=env)
        assert first.returncode == 0, first.stderr
        assert "Kafka started on 127.0.0.1:19192" in first.stdout
        assert "repairing a half-formatted Kafka data folder" in first.stderr
        second = zerotrace("infra", "up", "--only", "kafka", env=env)
        assert second.returncode == 0
        assert "Kafka already running on 127.0.0.1:19192" in second.stdout
        status = zerotrace("infra", "status", "--only", "kafka", env=env)
        assert "answering" in status.stdout and "not answering" not in status.stdout
    finally:
        down = zerotrace("infra", "down", "--only", "kafka", env=env)
    assert down.returncode == 0
    assert "Kafka: stopped" in down.stdout
    after = zerotrace("infra", "status", "--only", "kafka", env=env)
    assert "Kafka: stopped" in after.stdout


def test_collector_without_root_says_what_it_needs(env: dict[str, str]) -> None:
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root (to drop to an unprivileged user) and setpriv")
    result = subprocess.run(
        [
            setpriv,
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            sys.executable,
            "-m",
            "zerotrace_cli",
            "collector",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "the collector needs root" in one_line(result.stderr)
