"""Background servers by pid file (lib/zerotrace/infra/processes.py), with short-lived shell
programs standing in for the servers: a pid file is trusted only for a live java process of
that server's folder, a server that dies while starting fails at once with its log's telling
line, a taken port is one line, and stopping what does not run says so."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zerotrace.errors import ConfigError, TransientIO
from zerotrace.infra import processes
from zerotrace.infra.processes import ServerFiles

pytestmark = pytest.mark.unit


@pytest.fixture
def files(tmp_path: Path) -> ServerFiles:
    return ServerFiles("demo", tmp_path / "demo")


def test_the_files_of_a_server_live_in_its_folder(files: ServerFiles) -> None:
    assert files.pid_file == files.folder / "demo.pid"
    assert files.log_file == files.folder / "demo.log"


def test_a_missing_or_garbled_pid_file_means_not_running(files: ServerFiles) -> None:
    assert processes.running_pid(files) is None
    files.folder.mkdir()
    files.pid_file.write_text("not a pid\n")
    assert processes.running_pid(files) is None
    assert not files.pid_file.exists()  # stale: removed


def test_a_pid_that_is_not_our_java_is_not_trusted(files: ServerFiles) -> None:
    files.folder.mkdir()
    files.pid_file.write_text(f"{os.getpid()}\n")  # alive, but python, not our server
    assert processes.running_pid(files) is None
    assert not files.pid_file.exists()


def test_our_java_by_its_command_line_is_trusted_and_stopped(files: ServerFiles) -> None:
    # A process whose command line names java and the server's folder, as a server's does.
    argv = [sys.executable, "-c", "import time; time.sleep(60)", "java", str(files.folder)]
    pid = processes.spawn(files, argv)
    assert files.pid_file.read_text() == f"{pid}\n" and files.log_file.exists()
    deadline = time.monotonic() + 10
    while b"java" not in Path(f"/proc/{pid}/cmdline").read_bytes():  # forked, not exec'd yet
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert processes.running_pid(files) == pid
    assert processes.stop(files, timeout_s=10)
    assert processes.running_pid(files) is None and not files.pid_file.exists()
    assert not processes.stop(files)  # nothing runs any more


def test_a_server_that_dies_while_starting_fails_with_its_log(files: ServerFiles) -> None:
    script = "echo 'INFO starting'; echo 'ERROR bind failed: port in use'; echo 'INFO bye'"
    pid = processes.spawn(files, ["/bin/sh", "-c", script])
    said: list[str] = []
    with pytest.raises(TransientIO, match="demo exited during start-up: ERROR bind failed"):
        processes.wait_ready(files, pid, lambda: False, 30, said.append, "demo")
    assert not files.pid_file.exists()


def test_a_server_that_answers_is_ready(files: ServerFiles) -> None:
    pid = processes.spawn(files, ["/bin/sh", "-c", "sleep 30"])
    said: list[str] = []
    try:
        processes.wait_ready(files, pid, lambda: True, 30, said.append, "demo")
        assert said[0].startswith("demo is ready (")
    finally:
        os.killpg(pid, 9)
        processes._alive(pid)  # reaps it


def test_the_last_log_line_prefers_an_error(files: ServerFiles) -> None:
    assert processes.last_log_line(files) == "no log written"
    files.folder.mkdir()
    files.log_file.write_text("")
    assert processes.last_log_line(files) == "empty log"
    files.log_file.write_text("started\n\nlistening\n")
    assert processes.last_log_line(files) == "listening"
    files.log_file.write_text("a\njava.lang.Exception: boom\nb\n")
    assert processes.last_log_line(files) == "java.lang.Exception: boom"
    files.log_file.write_text("ERROR " + "x" * 400 + "\n")
    assert len(processes.last_log_line(files)) == 300


def test_a_taken_port_is_one_line_that_says_how_to_find_its_owner() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert processes.port_open(port)
        with pytest.raises(ConfigError, match=f"port 127.0.0.1:{port} is already taken") as caught:
            processes.require_free_ports("Kafka", [port])
        assert f"ss -ltnp 'sport = :{port}'" in str(caught.value)
    assert not processes.port_open(port)
    processes.require_free_ports("Kafka", [port])


def test_a_child_that_exited_is_not_alive() -> None:
    child = subprocess.Popen(["/bin/sh", "-c", "exit 0"])
    child.wait()
    assert not processes._alive(child.pid)
