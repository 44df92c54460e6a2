"""`zerotrace infra` (zerotrace_cli/infra_cmd.py) on a home where nothing runs: the nodes it acts
on, their ports from the settings, --only, and what status and down print. `up` starts real
servers and is tests/integration/test_infra.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

from zerotrace.infra.kafka_node import KafkaNode
from zerotrace.infra.opensearch_node import OpenSearchNode
from zerotrace_cli import main
from zerotrace_cli.infra_cmd import nodes

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ZEROTRACE_HOME", str(tmp_path))
    monkeypatch.setenv("ZEROTRACE_KAFKA_PORT", "19092")
    monkeypatch.setenv("ZEROTRACE_OPENSEARCH_PORT", "19200")
    return tmp_path


def test_the_nodes_live_under_home_on_the_ports_of_the_settings(home: Path) -> None:
    kafka, opensearch = nodes()
    assert kafka == KafkaNode(home / "infra", port=19092, controller_port=19093)
    assert opensearch == OpenSearchNode(home / "infra", port=19200, transport_port=19300)
    assert [type(n) for n in nodes("kafka")] == [KafkaNode]
    assert [type(n) for n in nodes("opensearch")] == [OpenSearchNode]


def test_status_of_nothing_running(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["infra", "status"]) == 0
    assert capsys.readouterr().out == "Kafka: stopped\nOpenSearch: stopped\n"


def test_down_of_nothing_running(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["infra", "down", "--only", "opensearch"]) == 0
    assert capsys.readouterr().out == "OpenSearch: was not running\n"


def test_an_unknown_action_or_server_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["infra", "restart"], ["infra", "up", "--only", "zookeeper"]):
        with pytest.raises(SystemExit) as done:
            main(argv)
        assert done.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
