"""Resolve a pom's runtime jars from Maven Central into a folder, and find Java 17."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from zerotrace.errors import FeatureUnavailable
from zerotrace.infra.processes import Progress


def require_java() -> str:
    java = shutil.which("java")
    if java is None:
        raise FeatureUnavailable(
            "Java 17 is needed for Kafka and OpenSearch and `java` is not on PATH "
            "(install it with `apt-get install openjdk-17-jre-headless`)"
        )
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    first = (out.stderr or out.stdout).splitlines()[:1]
    version = first[0] if first else "unknown"
    if '"1.' in version or any(f'"{v}' in version for v in range(9, 17)):
        raise FeatureUnavailable(f"Java 17 or newer is needed; `java` is {version}")
    return java


def resolve_jars(pom: Path, lib_dir: Path, progress: Progress, what: str) -> None:
    """Copy the pom's runtime dependencies into lib_dir. Re-resolves only when the pom changed;
    downloads land in ~/.m2 and are reused by every later run."""
    stamp = lib_dir / ".pom"
    if stamp.exists() and stamp.read_text() == pom.read_text():
        return
    mvn = shutil.which("mvn")
    if mvn is None:
        raise FeatureUnavailable("Maven is needed to fetch jars (`apt-get install maven`)")
    progress(f"resolving {what} jars from Maven Central (the first run downloads them)")
    if lib_dir.exists():
        shutil.rmtree(lib_dir)
    result = subprocess.run(
        [
            mvn,
            "-B",
            "-q",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={lib_dir}",
            "-DincludeScope=runtime",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        tail = [ln for ln in (result.stdout + result.stderr).splitlines() if "ERROR" in ln][:1]
        raise FeatureUnavailable(
            f"Maven could not resolve {what}: {tail[0] if tail else 'see mvn'}"
        )
    jars = len(list(lib_dir.glob("*.jar")))
    stamp.write_text(pom.read_text())
    progress(f"{what}: {jars} jars ready")
