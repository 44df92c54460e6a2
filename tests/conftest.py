"""Shared fixtures. Tiers are folders: tests/unit, tests/contract (run by unit and integration
wrappers), tests/integration (real Kafka and OpenSearch), tests/kernel (root, real eBPF),
tests/e2e (services end to end). Each folder's tests get its marker automatically."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from zerotrace.codec import AvroCodec
from zerotrace.schema_registry import InMemorySchemaRegistry
from zerotrace.schemas import load_schema_dir

TIERS = ("unit", "integration", "kernel", "e2e")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = Path(str(item.fspath)).parent.name
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))


def infra_missing(what: str) -> None:
    """Integration tests prove things against the real servers: a missing server fails them,
    unless a developer explicitly allows skipping."""
    message = f"{what} is not reachable; start it with `zerotrace infra up`"
    if os.environ.get("ZEROTRACE_ALLOW_SKIP_INFRA") == "1":
        pytest.skip(message)
    pytest.fail(message, pytrace=False)


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    from zerotrace.bus_kafka import check_reachable
    from zerotrace.errors import TransientIO

    bootstrap = os.environ.get("ZEROTRACE_KAFKA", "127.0.0.1:9092")
    try:
        check_reachable(bootstrap, timeout_s=5)
    except TransientIO:
        infra_missing(f"Kafka at {bootstrap}")
    return bootstrap


@pytest.fixture(scope="session")
def opensearch_url() -> str:
    import urllib.request

    url = os.environ.get("ZEROTRACE_OPENSEARCH", "http://127.0.0.1:9200")
    try:
        urllib.request.urlopen(f"{url}/_cluster/health", timeout=5).read()
    except OSError:
        infra_missing(f"OpenSearch at {url}")
    return url


@pytest.fixture
def codec() -> AvroCodec:
    return AvroCodec(load_schema_dir(), InMemorySchemaRegistry())


@pytest.fixture
def unique() -> Iterator[str]:
    yield uuid.uuid4().hex[:10]
