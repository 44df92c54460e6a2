"""The committed gRPC stubs are what scripts/gen-grpc.sh makes from the .proto today."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STUBS = ROOT / "services" / "query" / "zerotrace_query" / "api"


def test_stubs_match_the_proto(tmp_path: Path) -> None:
    subprocess.run(["bash", str(ROOT / "scripts" / "gen-grpc.sh"), str(tmp_path)], check=True)
    for name in ("zerotrace_api_pb2.py", "zerotrace_api_pb2.pyi", "zerotrace_api_pb2_grpc.py"):
        assert (tmp_path / name).read_text() == (STUBS / name).read_text(), (
            f"{name} is stale: run scripts/gen-grpc.sh and commit the result"
        )
