"""A real Zipkin server for the tests that export to one: its exec jar from Maven Central
(tests/harness/zipkin/pom.xml, resolved as the infra jars are and cached beside them under
$ZEROTRACE_HOME/infra/lib/zipkin), started with in-memory storage on 127.0.0.1 and a port the
kernel chose, ready when GET /health says UP, killed when the `with` block ends.

Start-up takes about 3.5 s on this project's 2-core machines with the JVM options below
(C1 only, serial GC, a small heap), about 5 s without them: start one per test module.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zerotrace import settings
from zerotrace.errors import TransientIO
from zerotrace.infra import maven
from zerotrace.infra.processes import ServerFiles, last_log_line

POM = Path(__file__).resolve().parent / "zipkin" / "pom.xml"
# A test's Zipkin holds a few hundred spans: a small heap, and the JIT and GC that start fastest.
JVM_OPTIONS = ("-Xms64m", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
START_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class ZipkinServer:
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str, **params: str | int) -> Any:
        """GET a path of Zipkin's API and parse its JSON answer."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=10) as response:
            return json.loads(response.read())

    def healthy(self) -> bool:
        try:
            return bool(self.get("/health").get("status") == "UP")
        except (OSError, ValueError):
            return False


def lib_dir() -> Path:
    return settings.load(settings.CommonSettings).home / "infra" / "lib" / "zipkin"


def progress(line: str) -> None:
    print(f"zipkin: {line}", file=sys.stderr, flush=True)


@contextmanager
def zipkin_server(folder: Path) -> Iterator[ZipkinServer]:
    """A Zipkin server whose log lives in `folder`; killed on exit, whatever the block did
    (its storage is memory: nothing to save, and SIGTERM would cost 2.4 s of Netty's
    graceful shutdown). FeatureUnavailable without Java 17 or Maven."""
    java = maven.require_java()
    maven.resolve_jars(POM, lib_dir(), progress, "Zipkin")
    jars = sorted(lib_dir().glob("zipkin-server-*-exec.jar"))
    assert len(jars) == 1, f"expected one Zipkin exec jar in {lib_dir()}, found {jars}"
    server = ZipkinServer(_free_port())
    files = ServerFiles("zipkin", folder)
    argv = [
        java,
        *JVM_OPTIONS,
        f"-Djava.io.tmpdir={folder}",
        "-jar",
        str(jars[0]),
        # Zipkin 3 serves through Armeria: its first port, bound to loopback only.
        "--armeria.ports[0].ip=127.0.0.1",
        f"--armeria.ports[0].port={server.port}",
        "--armeria.ports[0].protocols[0]=http",
    ]
    env = {**os.environ, "STORAGE_TYPE": "mem", "SELF_TRACING_ENABLED": "false"}
    folder.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(files.log_file, "wb") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
    try:
        while not server.healthy():
            if proc.poll() is not None:
                raise TransientIO(f"Zipkin exited during start-up: {last_log_line(files)}")
            if time.monotonic() - started > START_TIMEOUT_S:
                raise TransientIO(f"Zipkin did not answer within {START_TIMEOUT_S:.0f}s")
            time.sleep(0.1)
        progress(f"Zipkin is ready ({time.monotonic() - started:.1f}s)")
        yield server
    finally:
        proc.kill()
        proc.wait()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
