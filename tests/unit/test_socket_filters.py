"""--process and --cgroup: checked and translated before any probe is compiled; the cgroup v2
mount point found wherever the host put it."""

from __future__ import annotations

import argparse
import os

import pytest

from zerotrace.cli.socket_filters import socket_filters
from zerotrace.errors import ConfigError
from zerotrace_collector.cgroup import cgroup2_root

pytestmark = pytest.mark.unit

HYBRID = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""


def test_the_v2_mount_point_on_hybrid_and_unified_hosts() -> None:
    assert cgroup2_root(HYBRID) == "/sys/fs/cgroup/unified"
    assert cgroup2_root("cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n") == "/sys/fs/cgroup"
    assert cgroup2_root("cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n") is None


def args(process: str = "", cgroup: str = "") -> argparse.Namespace:
    return argparse.Namespace(process=process, cgroup=cgroup)


def test_no_filter_and_a_process_name() -> None:
    assert socket_filters(args()) == {"comm_prefix": "", "cgroup_id": 0}
    assert socket_filters(args("vllm"))["comm_prefix"] == "vllm"


@pytest.mark.parametrize("bad", ['py"thon', "x" * 16, "a b"])
def test_a_process_name_the_kernel_cannot_match_is_one_line(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"^--process .*15 characters"):
        socket_filters(args(bad))


def test_a_cgroup_by_path_is_its_directory_inode() -> None:
    with open("/proc/mounts") as mounts:
        root = cgroup2_root(mounts.read())
    if root is None:
        pytest.skip("no cgroup v2 hierarchy on this host")
    assert socket_filters(args(cgroup=root))["cgroup_id"] == os.stat(root).st_ino
    assert socket_filters(args(cgroup="."))["cgroup_id"] == os.stat(root).st_ino
    with pytest.raises(ConfigError, match=r"^--cgroup: no cgroup .*zt-none"):
        socket_filters(args(cgroup="zt-none"))
    with pytest.raises(ConfigError, match=r"^--cgroup: /etc is not inside"):
        socket_filters(args(cgroup="/etc"))
