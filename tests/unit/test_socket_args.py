"""--process, --cgroup and --payload-bytes: checked and translated before any probe is
compiled; the cgroup v2 mount point found wherever the host put it."""

from __future__ import annotations

import argparse
import os

import pytest

from zerotrace.errors import ConfigError
from zerotrace_cli.socket_args import socket_options
from zerotrace_collector.cgroup import Cgroup2, cgroup2_root

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


def args(process: str = "", cgroup: str = "", payload: int = 16384) -> argparse.Namespace:
    return argparse.Namespace(process=process, cgroup=cgroup, payload_bytes=payload)


def test_no_filter_and_a_process_name() -> None:
    assert socket_options(args()) == {"comm_prefix": "", "cgroup": None, "payload_max": 16384}
    assert socket_options(args("vllm"))["comm_prefix"] == "vllm"


@pytest.mark.parametrize("bad", ['py"thon', "x" * 16, "a b"])
def test_a_process_name_the_kernel_cannot_match_is_one_line(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"^--process .*15 characters"):
        socket_options(args(bad))


def test_a_cgroup_by_path_is_its_directory_inode_and_level() -> None:
    with open("/proc/mounts") as mounts:
        root = cgroup2_root(mounts.read())
    if root is None:
        pytest.skip("no cgroup v2 hierarchy on this host")
    assert socket_options(args(cgroup=root))["cgroup"] == Cgroup2(os.stat(root).st_ino, 0)
    assert socket_options(args(cgroup="."))["cgroup"] == Cgroup2(os.stat(root).st_ino, 0)
    with pytest.raises(ConfigError, match=r"^--cgroup: no cgroup directory .*zt-none"):
        socket_options(args(cgroup="zt-none"))
    with pytest.raises(ConfigError, match=r"^--cgroup: no cgroup directory .*cgroup.procs"):
        socket_options(args(cgroup="cgroup.procs"))
    with pytest.raises(ConfigError, match=r"^--cgroup: /etc is not inside"):
        socket_options(args(cgroup="/etc"))


@pytest.mark.parametrize("bad", [0, 32, 1000, 65536])
def test_payload_bytes_outside_what_the_probe_copies_is_one_line(bad: int) -> None:
    one_line = r"^--payload-bytes \d+: must be a power of two in 64\.\.32768$"
    with pytest.raises(ConfigError, match=one_line):
        socket_options(args(payload=bad))
    assert socket_options(args(payload=4096))["payload_max"] == 4096
