"""`zerotrace infra up|down|status`: the local Kafka and OpenSearch of the distributed mode."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from zerotrace import names, settings
from zerotrace.infra.kafka_node import KafkaNode
from zerotrace.infra.opensearch_node import OpenSearchNode


def register(sub: Any) -> None:
    p = sub.add_parser(
        "infra",
        help="start, stop or show the local Kafka and OpenSearch",
        description="Real Apache Kafka (KRaft) and OpenSearch 2.19 on 127.0.0.1, resolved from "
        "Maven Central on first use (about 150 MB, reused afterwards) and run with Java 17. "
        "Data, logs and pid files live under $ZEROTRACE_HOME/infra.",
    )
    p.add_argument("action", choices=["up", "down", "status"])
    p.add_argument(
        "--only", choices=[names.INFRA_KAFKA, "opensearch"], help="act on one server only"
    )
    p.set_defaults(handler=run)


def nodes(only: str | None = None) -> list[Any]:
    common = settings.load(settings.CommonSettings)
    home = common.home / "infra"
    all_nodes: dict[str, Any] = {
        names.INFRA_KAFKA: KafkaNode(
            home, port=common.kafka_port, controller_port=common.kafka_port + 1
        ),
        "opensearch": OpenSearchNode(
            home, port=common.opensearch_port, transport_port=common.opensearch_port + 100
        ),
    }
    return [n for name, n in all_nodes.items() if only in (None, name)]


def progress(line: str) -> None:
    print(f"zerotrace: {line}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    for node in nodes(args.only):
        if args.action == "up":
            print(node.up(progress))
        elif args.action == "down":
            print(f"{type(node).__name__[:-4]}: {'stopped' if node.down() else 'was not running'}")
        else:
            print(node.status())
    return 0
