"""rdma/sysfs_ports.py: a recorded sysfs tree of an mlx5 and an rxe port reads back as raw
values by folder; odd files are listed as unreadable, never a failure; no tree, no readings."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.rdma_trees import (
    MLX5_COUNTERS_0,
    MLX5_HW_0,
    RXE_HW_0,
    T0,
    write_port,
    write_tree,
)
from zerotrace_collector.rdma.sysfs_ports import list_ports, parse_counter, read_ports

pytestmark = pytest.mark.unit


def test_both_ports_read_as_raw_values_by_folder(tmp_path: Path) -> None:
    write_tree(tmp_path, 0)
    mlx5, rxe = read_ports(T0, tmp_path)
    assert (mlx5.device, mlx5.port, mlx5.ts_ns) == ("mlx5_0", 1, T0)
    assert mlx5.port_counters == MLX5_COUNTERS_0  # raw: port_xmit_data still in 4-byte units
    assert mlx5.hw_counters == MLX5_HW_0
    assert (rxe.device, rxe.port_counters, rxe.hw_counters) == ("rxe0", {}, RXE_HW_0)
    assert mlx5.unreadable == rxe.unreadable == ()


def test_ports_come_in_number_order_and_odd_files_are_listed(tmp_path: Path) -> None:
    for port in (10, 2):
        write_port(
            tmp_path,
            "mlx5_1",
            port,
            {"port_xmit_data": 8},
            {},
            extra={"counters/port_xmit_wait": "N/A\n", "hw_counters/np_cnp_sent": ""},
        )
    (tmp_path / "mlx5_1" / "ports" / "2" / "counters" / "sub").mkdir()  # not a counter
    readings = read_ports(5, tmp_path)
    assert [r.port for r in readings] == [2, 10]
    assert readings[0].port_counters == {"port_xmit_data": 8}
    assert readings[0].unreadable == ("counters/port_xmit_wait", "hw_counters/np_cnp_sent")


def test_no_rdma_device_gives_no_readings(tmp_path: Path) -> None:
    assert read_ports(1, tmp_path / "absent") == []
    (tmp_path / "odd").mkdir()  # a device folder without ports/
    assert read_ports(1, tmp_path) == []


@pytest.mark.parametrize(
    ("text", "value"),
    [("0\n", 0), ("18446744073709551615\n", 2**64 - 1), (" 42 ", 42), ("-1\n", None), ("", None)],
)
def test_parse_counter(text: str, value: int | None) -> None:
    assert parse_counter(text) == value


def test_list_ports_names_every_port_without_reading_a_counter(tmp_path: Path) -> None:
    write_tree(tmp_path, 0)
    (tmp_path / "mlx5_0" / "ports" / "2").mkdir()
    (tmp_path / "mlx5_0" / "ports" / "10").mkdir()
    (tmp_path / "mlx5_0" / "ports" / "not-a-port").mkdir()
    (tmp_path / "bonding_masters").mkdir()  # no ports/ folder: not a device
    assert list_ports(tmp_path) == [("mlx5_0", 1), ("mlx5_0", 2), ("mlx5_0", 10), ("rxe0", 1)]
    assert list_ports(tmp_path / "none") == []
