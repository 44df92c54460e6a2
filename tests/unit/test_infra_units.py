"""Pure parts of the local infrastructure (the servers themselves: tests/integration)."""

from __future__ import annotations

import base64

from zerotrace.infra.kafka_node import new_cluster_id


def test_kafka_cluster_ids_never_start_with_a_dash() -> None:
    ids = [new_cluster_id() for _ in range(2000)]  # about 31 would start with '-' otherwise
    assert not any(i.startswith("-") for i in ids)
    assert all(len(base64.urlsafe_b64decode(i + "==")) == 16 for i in ids)
