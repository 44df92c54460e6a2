"""A single-node OpenSearch 2.19 on 127.0.0.1, from Maven Central jars.

The stock bootstrap refuses to run as root and wants a distribution's modules/ tree; our
launcher (infra/opensearch/ZerotraceOpenSearch.java) builds the node with the needed modules
as classpath plugins instead. It is compiled once per jar set with javac.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from zerotrace.errors import FeatureUnavailable
from zerotrace.infra import maven, processes
from zerotrace.infra.processes import Progress, ServerFiles

SOURCE_DIR = Path(__file__).resolve().parents[3] / "infra" / "opensearch"
POM = SOURCE_DIR / "pom.xml"
LAUNCHER = SOURCE_DIR / "ZerotraceOpenSearch.java"
MAIN_CLASS = "ZerotraceOpenSearch"


@dataclass(frozen=True)
class OpenSearchNode:
    home: Path  # <ZEROTRACE_HOME>/infra
    port: int = 9200
    transport_port: int = 9300

    @property
    def files(self) -> ServerFiles:
        return ServerFiles("opensearch", self.home / "opensearch")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def lib_dir(self) -> Path:
        return self.home / "lib" / "opensearch"

    @property
    def classes_dir(self) -> Path:
        return self.home / "lib" / "opensearch-launcher"

    def up(self, progress: Progress) -> str:
        if processes.running_pid(self.files) is not None and self.answers():
            return f"OpenSearch already running on {self.url}"
        java = maven.require_java()
        processes.require_free_ports("OpenSearch", [self.port, self.transport_port])
        maven.resolve_jars(POM, self.lib_dir, progress, "OpenSearch")
        self._compile_launcher(java, progress)
        node_home = self.files.folder / "node"
        node_home.mkdir(parents=True, exist_ok=True)
        argv = [
            java,
            "-Xms512m",
            "-Xmx1g",
            "-XX:+UseG1GC",
            "-cp",
            f"{self.classes_dir}:{self.lib_dir}/*",
            MAIN_CLASS,
            "--home",
            str(node_home),
            "--http-port",
            str(self.port),
            "--transport-port",
            str(self.transport_port),
            "--cluster-name",
            "zerotrace",
        ]
        progress(f"starting OpenSearch on {self.url}")
        pid = processes.spawn(self.files, argv)
        processes.wait_ready(self.files, pid, self.answers, 180, progress, "OpenSearch")
        return f"OpenSearch started on {self.url} (pid {pid})"

    def _compile_launcher(self, java: str, progress: Progress) -> None:
        stamp = self.classes_dir / ".source"
        source = LAUNCHER.read_text() + (self.lib_dir / ".pom").read_text()
        if stamp.exists() and stamp.read_text() == source:
            return
        javac = shutil.which("javac") or str(Path(java).resolve().parent / "javac")
        if not Path(javac).exists():
            raise FeatureUnavailable("javac (a JDK 17) is needed to build the OpenSearch launcher")
        progress("compiling the OpenSearch launcher")
        shutil.rmtree(self.classes_dir, ignore_errors=True)
        self.classes_dir.mkdir(parents=True)
        result = subprocess.run(
            [
                javac,
                "-nowarn",
                "-cp",
                f"{self.lib_dir}/*",
                "-d",
                str(self.classes_dir),
                str(LAUNCHER),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise FeatureUnavailable(
                f"compiling {LAUNCHER.name} failed: {result.stderr.strip().splitlines()[:1]}"
            )
        stamp.write_text(source)

    def answers(self) -> bool:
        """Ready means the cluster health call answers green or yellow."""
        try:
            with urllib.request.urlopen(f"{self.url}/_cluster/health", timeout=2) as response:
                status = json.load(response).get("status")
        except (OSError, ValueError):
            return False
        return status in ("green", "yellow")

    def down(self) -> bool:
        return processes.stop(self.files, timeout_s=60)

    def status(self) -> str:
        pid = processes.running_pid(self.files)
        if pid is None:
            return "OpenSearch: stopped"
        state = "answering" if self.answers() else "not answering"
        return f"OpenSearch: running (pid {pid}) on {self.url}, {state}"
