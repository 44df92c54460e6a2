"""docker-compose.yml cannot run here (no Docker engine); this checks it says what the code
does: every service of the CLI, every topic of the names registry, the servers they need."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from zerotrace import names
from zerotrace_cli import build_parser

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"
# The services of the distributed mode, each a CLI subcommand of the same name.
SERVICES = ("collector", "correlator", "profiler-agg", "query")


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


def cli_commands() -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return set(sub.choices)  # type: ignore[arg-type]


def test_every_service_is_there_and_runs_a_real_subcommand() -> None:
    services = compose()["services"]
    assert {"kafka", "opensearch", *SERVICES} <= set(services)
    for name in SERVICES:
        command = services[name]["command"]
        assert command[0] == name
        assert command[0] in cli_commands()
        assert services[name]["environment"]["ZEROTRACE_KAFKA"] == "kafka:9092"


def test_every_registry_topic_is_created() -> None:
    command = compose()["services"]["topics"]["command"]
    assert command[:2] == ["topics", "--create"]
    assert command[2:] == [t.name for t in names.ALL_TOPICS]


def test_collector_has_what_ebpf_needs() -> None:
    collector = compose()["services"]["collector"]
    assert collector["pid"] == "host"
    assert {"BPF", "PERFMON", "SYS_ADMIN"} <= set(collector["cap_add"])
    assert any(v.startswith("/sys/kernel/tracing") for v in collector["volumes"])


def test_servers_match_the_local_infra() -> None:
    services = compose()["services"]
    assert services["kafka"]["image"].startswith("apache/kafka:3.9")
    assert services["opensearch"]["image"].startswith("opensearchproject/opensearch:2.19")
    assert services["opensearch"]["environment"]["discovery.type"] == "single-node"
