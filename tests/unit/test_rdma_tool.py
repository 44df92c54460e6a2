"""rdma/rdma_tool.py: runs `rdma -j statistic ...` (here a stand-in program that prints a
recorded output, or fails as rdma does without RDMA netlink) and parses what it prints; a
missing program or a failure is one FeatureUnavailable line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_rdma_statistic import QP_JSON, WANT
from zerotrace.errors import FeatureUnavailable
from zerotrace_collector.rdma.rdma_tool import port_statistics, qp_counter_sets

pytestmark = pytest.mark.unit


def stand_in(tmp_path: Path, body: str) -> str:
    path = tmp_path / "rdma"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_the_qp_counter_sets_it_prints(tmp_path: Path) -> None:
    (tmp_path / "out.json").write_text(QP_JSON)
    program = stand_in(
        tmp_path,
        f'[ "$*" = "-j statistic qp show" ] || exit 3\ncat {tmp_path / "out.json"}\n',
    )
    assert qp_counter_sets(program) == WANT


def test_port_statistics(tmp_path: Path) -> None:
    program = stand_in(
        tmp_path,
        '[ "$*" = "-j statistic show" ] || exit 3\n'
        'echo \'[{"ifname":"rxe0","port":1,"sent_pkts":7}]\'\n',
    )
    assert [(p.device, p.port, p.counters) for p in port_statistics(program)] == [
        ("rxe0", 1, {"sent_pkts": 7})
    ]


def test_no_rdma_netlink_is_one_line(tmp_path: Path) -> None:
    program = stand_in(tmp_path, 'echo "Failed to open NETLINK_RDMA socket" >&2\nexit 1\n')
    with pytest.raises(FeatureUnavailable, match=r"failed: Failed to open NETLINK_RDMA socket$"):
        qp_counter_sets(program)


def test_no_program(tmp_path: Path) -> None:
    with pytest.raises(FeatureUnavailable, match="not found on PATH"):
        qp_counter_sets(str(tmp_path / "absent"))


def test_whatever_rdma_this_machine_has_gives_sets_or_one_line() -> None:
    # Without RDMA netlink (this kernel) or without iproute2: one line, never a traceback.
    try:
        assert isinstance(qp_counter_sets(), list)
    except FeatureUnavailable as exc:
        assert "\n" not in str(exc)
