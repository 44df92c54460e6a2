"""Java and the jars of a pom (lib/zerotrace/infra/maven.py), with stand-in `java` and `mvn`
programs on PATH: Java 17 or newer accepted and older ones refused in one line, jars resolved
only when the pom changed, and Maven's failures said in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from zerotrace.errors import FeatureUnavailable
from zerotrace.infra import maven

pytestmark = pytest.mark.unit


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))
    return folder


def program(folder: Path, name: str, script: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)


@pytest.mark.parametrize(
    "version",
    ['openjdk version "17.0.10" 2024-01-16', 'openjdk version "21.0.2" 2024-01-16'],
)
def test_java_17_or_newer_is_accepted(bin_dir: Path, version: str) -> None:
    program(bin_dir, "java", f"echo '{version}' >&2")  # java -version writes to stderr
    assert maven.require_java() == str(bin_dir / "java")


@pytest.mark.parametrize(
    "version", ['java version "1.8.0_392"', 'openjdk version "11.0.21" 2023-10-17']
)
def test_an_older_java_is_refused_in_one_line(bin_dir: Path, version: str) -> None:
    program(bin_dir, "java", f"echo '{version}' >&2")
    with pytest.raises(FeatureUnavailable, match="Java 17 or newer is needed") as caught:
        maven.require_java()
    assert version in str(caught.value) and "\n" not in str(caught.value)


def test_no_java_says_how_to_install_it(bin_dir: Path) -> None:
    with pytest.raises(FeatureUnavailable, match="openjdk-17-jre-headless"):
        maven.require_java()


# Copies two jars where it is told; PATH holds only the stand-ins, hence the full paths.
MVN_COPIES = """for a; do case "$a" in -DoutputDirectory=*) d="${a#*=}";; esac; done
/bin/mkdir -p "$d" && /bin/touch "$d/a.jar" "$d/b.jar" && echo run >> "${0%/*}/runs"
"""


def test_jars_are_resolved_once_per_pom(bin_dir: Path, tmp_path: Path) -> None:
    program(bin_dir, "mvn", MVN_COPIES)
    pom, lib = tmp_path / "pom.xml", tmp_path / "lib"
    pom.write_text("<project>1</project>")
    said: list[str] = []
    maven.resolve_jars(pom, lib, said.append, "Kafka")
    assert sorted(p.name for p in lib.glob("*.jar")) == ["a.jar", "b.jar"]
    assert said[-1] == "Kafka: 2 jars ready"
    maven.resolve_jars(pom, lib, said.append, "Kafka")  # the same pom: nothing to do
    assert (bin_dir / "runs").read_text() == "run\n"
    (lib / "stale.jar").touch()
    pom.write_text("<project>2</project>")  # a changed pom: resolved again, from scratch
    maven.resolve_jars(pom, lib, said.append, "Kafka")
    assert (bin_dir / "runs").read_text() == "run\nrun\n"
    assert not (lib / "stale.jar").exists()


def test_maven_missing_or_failing_is_one_line(bin_dir: Path, tmp_path: Path) -> None:
    pom = tmp_path / "pom.xml"
    pom.write_text("<project/>")
    with pytest.raises(FeatureUnavailable, match="apt-get install maven"):
        maven.resolve_jars(pom, tmp_path / "lib", lambda _line: None, "Kafka")
    program(
        bin_dir, "mvn", "echo '[INFO] scanning'; echo '[ERROR] Could not resolve kafka'; exit 1"
    )
    with pytest.raises(FeatureUnavailable) as caught:
        maven.resolve_jars(pom, tmp_path / "lib", lambda _line: None, "Kafka")
    assert str(caught.value) == "Maven could not resolve Kafka: [ERROR] Could not resolve kafka"
    assert not (tmp_path / "lib" / ".pom").exists()  # a failure is tried again next time
