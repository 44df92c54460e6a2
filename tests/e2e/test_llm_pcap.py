"""A pcap of an LLM serving run, written by zerotrace's own capture, gives the same
per-request figures through `zerotrace analyze` as the clients measured, and so does a copy
of it with segments reordered and duplicated."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.llm_fixtures import (
    REPO,
    REQUESTS,
    Server,
    load_command,
    read_server_truth,
    read_truth,
    start_server,
)
from tests.ebpf_required import require_ebpf
from tests.harness.accuracy import TOLERANCE_NS, compare, ttft_window, uncertain
from zerotrace_collector.packets.analysis import PcapAnalysis
from zerotrace_collector.packets.capture_file import read_capture
from zerotrace_collector.packets.pcap import pcap_bytes

require_ebpf()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from start_server(tmp_path, tls=False)


def reassembled_bytes(pcap: Path) -> int:
    analysis = PcapAnalysis("test")
    for _record in analysis.records(pcap):
        pass
    return int(analysis.summary()["bytes"])


def analyze(pcap: Path, out: Path) -> list[dict[str, Any]]:
    result = subprocess.run(
        [sys.executable, "-m", "zerotrace_cli", "analyze", str(pcap), "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return [r for r in rows if r["record"] == "zerotrace.derived.LlmRequest"]


def shuffled_and_duplicated(pcap: Path, out: Path) -> tuple[int, int]:
    """Each block of 8 packets in a random order, every 10th packet written twice."""
    packets, report = read_capture(pcap.read_bytes())
    assert report.problem is None
    rng = random.Random(23)
    reordered: list[Any] = []
    duplicates = 0
    for start in range(0, len(packets), 8):
        block = packets[start : start + 8]
        rng.shuffle(block)
        for packet in block:
            reordered.append(packet)
            if len(reordered) % 10 == 0:
                reordered.append(packet)
                duplicates += 1
    out.write_bytes(pcap_bytes(reordered, packets[0].linktype))
    return len(packets), duplicates


def test_pcap_of_a_run_gives_the_clients_figures(server: Server, tmp_path: Path) -> None:
    pcap, truth_file = tmp_path / "run.pcap", tmp_path / "truth.json"
    capture = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zerotrace_cli",
            "capture",
            "-i",
            "lo",
            "--port",
            str(server.port),
            "-w",
            str(pcap),
        ],
        cwd=REPO,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.5)  # the socket is bound before the load starts
    load = subprocess.run(
        load_command(server, truth_file), cwd=REPO, capture_output=True, text=True, timeout=300
    )
    capture.send_signal(signal.SIGTERM)
    _, capture_err = capture.communicate(timeout=30)
    assert load.returncode == 0, load.stdout + load.stderr
    assert capture.returncode == 0, capture_err
    assert " 0 dropped by the kernel" in capture_err
    truths = read_truth(truth_file)

    records = analyze(pcap, tmp_path / "a.jsonl")
    ours = {r["model"]: r for r in records if r["model"].startswith("model-")}
    assert len(ours) == REQUESTS
    assert {t["model"]: t["output_tokens"] for t in truths} == {
        m: r["output_tokens"] for m, r in ours.items()
    }
    stamps = read_server_truth(server.truth)
    assert stamps.keys() >= ours.keys()
    problems = compare(truths, records, "NETWORK", server=stamps)
    client_only = compare(truths, records, "NETWORK")
    print(
        f"\npcap: {len(problems)} of {REQUESTS} outside the window "
        f"({len(client_only)} outside the client's measured window alone), "
        f"{len(uncertain(truths))} requests with a measured client-side wait:\n"
        + "\n".join(problems)
    )
    # On the wire a token is seen before the client reads it, earlier by the client's wake-up
    # delay (the clients measure it: wait and run time, send window) and by the time the
    # kernel took to hand it to the client's socket (bounded by the server's own stamps; see
    # tests/harness/accuracy.py): every request must fall inside that window.
    assert problems == [], "\n".join(problems[:20])
    for t in truths:
        r = ours[t["model"]]
        _low, high = ttft_window(t)
        assert r["ttft_ns"] is not None and r["ttft_ns"] <= high + TOLERANCE_NS, t["model"]

    messy = tmp_path / "messy.pcap"
    total, duplicates = shuffled_and_duplicated(pcap, messy)
    assert duplicates > total // 20
    # Every byte of the streams comes back from the reordered, duplicated copy, and each
    # request's figures with it: a response waits for the late segments of its request.
    assert reassembled_bytes(messy) == reassembled_bytes(pcap)
    again = {r["model"]: r for r in analyze(messy, tmp_path / "b.jsonl") if r["model"] in ours}
    assert again.keys() == ours.keys()
    differ = [
        f"{m}: {field} {ours[m][field]} -> {again[m][field]}"
        for m in sorted(ours)
        for field in (
            "output_tokens",
            "content_events",
            "status_code",
            "error",
            "ttft_ns",
            "tpot_ns",
        )
        if again[m][field] != ours[m][field]
    ]
    # Times too, to the nanosecond: a late packet keeps its own (older) time.
    assert differ == [], "\n".join(differ[:20])
