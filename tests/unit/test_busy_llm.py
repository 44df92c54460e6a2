"""The figures and verdicts of bench/busy_llm.py, and the test server's burn mode it relies on.
No root, no eBPF, no server: records and truths are written inline."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from bench.busy_llm import (
    MODE_NAMES,
    PIECES,
    Accuracy,
    Run,
    assess,
    cpu_busy_pct,
    error_sides,
    main,
    mode_lines,
    noise_lines,
    pieces_lines,
    read_delays_ms,
    round_modes,
    summary_notes,
    verdict_lines,
    verdicts,
    worst_errors,
)
from bench.llm_overhead import Measure
from tests.harness.openai_server import burn, burn_bytes, generate

pytestmark = pytest.mark.unit

MS = 1_000_000


def truth(name: str = "model-x-000", **changes: Any) -> dict[str, Any]:
    t = {
        "model": name,
        "error": "",
        "stream": True,
        "output_tokens": 3,
        "sent_ns": 1_000 * MS,
        "sent_done_ns": 1_000 * MS,
        "token_ns": [1_060 * MS, 1_070 * MS, 1_080 * MS],
        "token_wait_ns": [0, 0, 0],
    }
    return {**t, **changes}


def record(name: str = "model-x-000", ttft_ms: float = 60, tpot_ms: float = 10) -> dict[str, Any]:
    return {
        "model": name,
        "observation_point": "SERVER",
        "output_tokens": 3,
        "ttft_ns": int(ttft_ms * MS),
        "tpot_ns": int(tpot_ms * MS),
        "error": None,
    }


def test_cpu_busy_is_the_share_outside_idle_and_iowait() -> None:
    before = "cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3 4\n"
    after = "cpu  250 0 200 800 150 0 0 0 0 0\ncpu0 1 2 3 4\n"
    # busy +250 of +400 in all (idle +100, iowait +50)
    assert cpu_busy_pct(before, after) == pytest.approx(62.5)
    assert cpu_busy_pct(before, before) == 0.0


def test_worst_errors_take_one_server_record_per_request_against_the_client() -> None:
    truths = [truth("model-a-000"), truth("model-b-001"), truth("model-c-002")]
    records = [
        record("model-a-000", ttft_ms=58.5, tpot_ms=10.4),
        record("model-b-001", ttft_ms=61.0, tpot_ms=9.0),
        record("model-c-002", ttft_ms=10.0),  # two records: counted apart, not as an error
        record("model-c-002", ttft_ms=10.0),
        {**record("model-a-000", ttft_ms=1.0), "observation_point": "CLIENT"},
        record("warmup-openai-chat", ttft_ms=1.0),
    ]
    ttft, tpot = worst_errors(truths, records)
    assert ttft == pytest.approx(1.5)
    assert tpot == pytest.approx(1.0)


def test_assess_counts_records_misses_and_the_server_waits_that_explain_them() -> None:
    names = ["model-a-000", "model-b-001", "model-c-002", "model-d-003"]
    truths = [truth(name) for name in names]
    records = [
        record("model-a-000", ttft_ms=60.5),
        record("model-b-001", ttft_ms=50.0),
        {**record("model-d-003", ttft_ms=40.0), "output_tokens": 2},  # two lines, one request
    ]
    # b's request reached the app 10 ms after the client sent it: a wait in the server.
    stamps = {"model-b-001": {"request_ns": 1_010 * MS, "first_ns": 1_060 * MS, "last_ns": 0}}
    a = assess(truths, records, stamps)
    assert a.recorded == 3
    assert a.worst_ttft_ms == pytest.approx(20.0)
    assert len(a.problems) == 4  # b's TTFT, c's missing record, d's tokens and TTFT
    assert a.outside == 3
    assert a.server_waits == 1


def test_error_sides_say_which_end_of_a_ttft_is_off_and_the_client_s_slack() -> None:
    offset = 5_000_000 * MS  # records in epoch ns, truths in CLOCK_MONOTONIC ns
    truths = [
        truth("model-a-000", sent_done_ns=1_000 * MS + MS // 2, token_wait_ns=[4 * MS, 0, 0]),
        truth("model-b-001"),
    ]
    records = [
        # started 2 ms after the send began, first token 7 ms before the client read it
        {**record("model-a-000", ttft_ms=51), "start_ns": offset + 1_002 * MS},
        {**record("model-b-001", ttft_ms=60), "start_ns": offset + 1_000 * MS},
    ]
    assert error_sides(truths, records, ["model-a-000", "model-z-099"], offset) == [
        "model-a-000: start +2.00 ms from the client's send (which took 0.50 ms), "
        "first token -7.00 ms from its read (which may be 4.00 ms late)"
    ]


def measured(rps: float, p99: float, failed: int = 0) -> Measure:
    return Measure("x", rps, p99 / 2, p99, failed)


def accuracy(recorded: int, problems: int = 0) -> Accuracy:
    return Accuracy(recorded, 0.8, 0.3, ["p"] * problems, outside=problems)


def test_verdicts_per_scheme_over_the_means_of_the_rounds() -> None:
    runs = [
        Run("http", "off", 10, measured(100, 50), 99, 1.5),
        Run("http", "on", 10, measured(98, 50.5), 99, 1.5, accuracy(10)),
        Run("http", "on", 10, measured(96, 50.4), 99, 1.5, accuracy(10)),
        Run("http", "off", 10, measured(100, 50), 99, 1.5),
        Run("https", "off", 10, measured(80, 60), 99, 1.5),
        Run("https", "on", 10, measured(70, 62), 99, 1.5, accuracy(9, problems=1)),
    ]
    found = verdicts(runs)
    assert [(v.scheme, v.ok) for v in found] == [
        ("http", True),
        ("http", True),
        ("http", True),
        ("http", True),
        ("https", False),  # 12.5 % loss
        ("https", False),  # +2 ms
        ("https", False),  # 9 of 10
        ("https", False),  # one outside
    ]
    assert found[0].figure == "+3.0 % (100.0 -> 97.0 req/s)"
    assert found[1].figure == "+0.45 ms"
    assert found[6].figure == "9/10"
    assert (
        found[7].figure
        == "1 outside (0 waited for the server); worst |error| TTFT 0.80 ms, TPOT 0.30 ms"
    )
    lines = verdict_lines(found)
    assert lines[0].startswith(" http  throughput loss <= 5 %")
    assert lines[0].endswith("PASS") and lines[-1].endswith("MISS")


def test_noise_lines_show_how_far_the_unobserved_rounds_are_apart() -> None:
    runs = [
        Run("http", "off", 10, measured(20.6, 63), 99, 1.5),
        Run("http", "on", 10, measured(19.0, 70), 99, 1.5, accuracy(10)),
        Run("http", "off", 10, measured(19.4, 87), 99, 1.5),
        Run("https", "off", 10, measured(18, 60), 99, 1.5),  # one unobserved round: no spread
        Run("https", "on", 10, measured(17, 62), 99, 1.5, accuracy(10)),
    ]
    assert noise_lines(runs) == [
        " http  unobserved rounds among themselves: 19.4-20.6 req/s (6.0 % apart), "
        "p99 TTFT 63.00-87.00 ms (24.00 ms apart)"
    ]


def test_pieces_are_set_beside_the_default_against_the_same_unobserved_rounds() -> None:
    runs = [
        Run("http", "off", 10, measured(100, 50), 99, 1.5),
        Run("http", "on", 10, measured(99, 50.5), 99, 1.5, accuracy(10)),
        Run("http", PIECES, 10, measured(96, 54), 99, 1.5, accuracy(10)),
        Run("https", "off", 10, measured(80, 60), 99, 1.5),  # no round in pieces: no line
        Run("https", "on", 10, measured(70, 62), 99, 1.5, accuracy(10)),
    ]
    assert pieces_lines(runs) == [
        " http  zerotrace's work in whole batches (default): added p99 TTFT +0.50 ms, "
        "throughput loss +1.0 %",
        " http  zerotrace's work in 0.5 ms pieces          : added p99 TTFT +4.00 ms, "
        "throughput loss +4.0 %",
    ]
    # The rounds in pieces are not the default's: its verdicts stay its own.
    assert [v.figure for v in verdicts(runs)][:2] == ["+1.0 % (100.0 -> 99.0 req/s)", "+0.50 ms"]


def test_the_modes_of_a_round_turn_so_none_always_runs_first() -> None:
    assert [round_modes(r, False) for r in range(2)] == [("off", "on"), ("on", "off")]
    assert [round_modes(r, True)[0] for r in range(3)] == ["off", "on", PIECES]
    assert all(sorted(round_modes(r, True)) == sorted(MODE_NAMES) for r in range(5))


def test_a_failed_request_fails_every_request_recorded() -> None:
    runs = [
        Run("http", "off", 10, measured(100, 50), 99, 1.5),
        Run("http", "on", 10, measured(100, 50, failed=1), 99, 1.5, accuracy(10)),
    ]
    assert [v.ok for v in verdicts(runs) if v.target == "every request recorded"] == [False]


def test_mode_lines_show_the_accuracy_and_zerotrace_s_notes_of_observed_runs() -> None:
    off = mode_lines(1, "off", Run("http", "off", 10, measured(12.34, 80), 97.4, 1.5))
    assert off == [
        " http round 1 off:   12.3 req/s, TTFT p50  40.00 ms p99  80.00 ms, "
        "cores  97 % busy, 0 failed, requests read by the server p99 1.50 ms after sent"
    ]
    accuracy = Accuracy(10, 0.5, 0.25, ["a", "b"], outside=2, server_waits=1)
    on = mode_lines(1, "on", Run("https", "on", 10, measured(12, 80), 99, 1.5, accuracy, ["cpu"]))
    assert on[1:] == [
        " " * 20 + "10/10 recorded, worst |error| TTFT 0.50 ms TPOT 0.25 ms, 2 outside "
        "tolerance (1 of them: the request waited for the server)",
        " " * 20 + "[zerotrace] cpu",
    ]


def test_read_delays_are_the_server_s_app_stamp_less_the_client_s_send() -> None:
    truths = [truth("model-a-000"), truth("model-b-001"), truth("model-c-002", error="boom")]
    stamps = {
        "model-a-000": {"request_ns": 1_002 * MS},
        "model-c-002": {"request_ns": 1_003 * MS},
    }
    assert read_delays_ms(truths, stamps) == [2.0]


def test_summary_notes_keep_zerotrace_s_cpu_and_the_socket_probe_s_losses() -> None:
    summary = (
        "summary: 0 spans (none; 0 failed), 412 LLM requests, 0 dead letters\n"
        "  socket: lost 0, shed 0, ciphertext_dropped 42\n"
        "  collector: cpu_pauses 1834\n"
        "  correlator: http.conns.not_http 1\n"
        "  zerotrace itself: 0.4 s CPU over 10.8 s (0.03 core; budget 0.5 core)\n"
    )
    assert summary_notes(summary) == [
        "socket: lost 0, shed 0, ciphertext_dropped 42",
        "collector: cpu_pauses 1834",
        "zerotrace itself: 0.4 s CPU over 10.8 s (0.03 core; budget 0.5 core)",
    ]


def test_arguments_out_of_range_are_refused_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.argv", ["busy_llm", "--schemes", "ftp"])
    with pytest.raises(SystemExit):
        main()
    assert "--schemes" in capsys.readouterr().err


def test_burn_costs_about_the_cpu_it_was_sized_for() -> None:
    data = memoryview(bytes(burn_bytes(2.0)))
    start = time.thread_time_ns()
    burn(data)
    took_ms = (time.thread_time_ns() - start) / MS
    assert 1.0 < took_ms < 20.0  # sized from the fastest of five; a busy machine adds to it


def test_burn_mode_pauses_once_for_the_prefill_and_once_per_later_token() -> None:
    pauses: list[float] = []
    sent: list[dict[str, Any]] = []

    async def pause(pace_s: float) -> None:
        pauses.append(pace_s)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    request = {"stream": True, "max_tokens": 4, "zt_pace": {"first_ms": 30, "token_ms": 7}}
    asyncio.run(generate("completions", request, send, pause=pause))
    assert pauses == [0.03, 0.007, 0.007, 0.007]
    pauses.clear()
    asyncio.run(generate("chat", {**request, "stream": False}, send, pause=pause))
    assert pauses == [0.03, 0.007, 0.007, 0.007]
