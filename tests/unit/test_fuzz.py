"""The fuzz targets of `bench.fuzz` over their seed corpus and a short deterministic mutation
run: every parser of untrusted bytes survives it (0 crashes) with its retained bytes under the
bound its limits allow. The million-input runs are the command's (bench/README.md); this is
the part the test command runs, plus the harness's own failure paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.fuzz import FuzzResult, fuzz, main
from bench.fuzz_base import Target
from bench.fuzz_mutate import Mutator
from bench.fuzz_script import script, unscript
from bench.fuzz_targets import TARGETS, seed_corpus
from zerotrace_correlator.http1 import Http1Parser
from zerotrace_correlator.openai_stream import parse_request_body

pytestmark = pytest.mark.unit

SEED = 20261204
# Per target, seeds included: about 4 s for all twelve on this 2-core machine.
INPUTS = 1_500
# Short inputs keep this run quick; crossing the 64 KiB and 1 MiB limits in one input is the
# command's work (its default is 256 KiB).
MAX_LEN = 512


def crash_message(result: FuzzResult) -> str:
    crash = result.first_crash
    return "" if crash is None else f"input {crash.index}: {crash.data!r}\n{crash.error}"


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_a_short_fuzz_run_finds_no_crash_and_no_growth(name: str) -> None:
    result = fuzz(name, INPUTS, seed=SEED, max_len=MAX_LEN)
    assert result.inputs == INPUTS
    assert result.crashes == 0, crash_message(result)
    if not result.stateless:
        assert len(result.retained) >= 8
        assert result.peak <= result.bound
    assert result.verdict == "PASS"


@pytest.mark.parametrize(
    "name", ["avro", "packet_decode", "pcap", "pcapng", "socket_decode", "tcp_reassembly"]
)
def test_the_seeds_are_valid_inputs(name: str) -> None:
    """Mutations start past a parser's first checks only if the seeds pass them."""
    target = TARGETS[name]()
    corpus = seed_corpus(name, target)
    assert len(corpus) >= 2
    for data in corpus:
        target.feed(data)
    assert target.rejected == 0


class _Brittle(Target):
    name = "brittle"

    def __init__(self) -> None:
        super().__init__()
        self.kept: list[bytes] = []

    def feed(self, data: bytes) -> None:
        if b"\xff" in data:
            raise IndexError("a parser that trips on 0xff")
        self.kept.append(data)  # and never lets go

    def state(self) -> object:
        return self.kept

    def bound(self) -> int:
        return 4096


@pytest.fixture
def brittle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TARGETS, "brittle", _Brittle)
    monkeypatch.setattr("bench.fuzz.seed_corpus", lambda _name, _target: [b"ab", b"cd\x00"])


@pytest.mark.usefixtures("brittle")
def test_a_crash_and_growth_fail_the_run(tmp_path: Path) -> None:
    result = fuzz("brittle", 2_000, seed=1)
    assert result.crashes > 0
    crash = result.first_crash
    assert crash is not None and b"\xff" in crash.data
    assert "IndexError: a parser that trips on 0xff" in crash.error
    assert result.peak > result.bound
    assert result.verdict == "FAIL: crash"
    args = ["--target", "brittle", "--inputs", "500", "--crash-dir", str(tmp_path)]
    assert main(args) == 1


def test_the_mutator_is_deterministic_and_keeps_to_its_length() -> None:
    corpus = [b"GET / HTTP/1.1\r\n\r\n", b"data: x\n\n"]
    first = Mutator(corpus, seed=7, max_len=300)
    again = Mutator(corpus, seed=7, max_len=300)
    inputs = [first.next() for _ in range(2_000)]
    assert inputs == [again.next() for _ in range(2_000)]
    assert max(len(data) for data in inputs) <= 300
    assert len(set(inputs)) > 1_000  # mutated, not the seeds over and over
    assert any(data in corpus for data in inputs)


def test_a_script_holds_records_and_reads_back_leniently() -> None:
    records = [(1, b"abc"), (0x80, b""), (7, b"x" * 300)]
    data = script(records)
    assert unscript(data) == records
    assert unscript(data[:-10]) == [*records[:2], (7, b"x" * 290)]
    assert unscript(b"\x05") == [(5, b"")]


def test_deeply_nested_json_in_a_request_body_is_not_a_crash() -> None:
    """Found by `bench.fuzz --target openai_stream` (2026-12-04): json.loads raises
    RecursionError (not a ValueError) on ~1,000 nested brackets, in parse_request_body, a
    whole response body and an SSE event alike; openai_stream.py now takes it as not JSON."""
    info = parse_request_body(b"[" * 100_000)
    assert info.model is None


def test_a_content_length_of_non_ascii_digits_is_not_a_crash() -> None:
    """Found by `bench.fuzz --target conversation` (2026-12-04): `str.isdigit` accepts `²`
    (latin-1 0xb2), `int` does not, so http1.py's `_frame` raised ValueError instead of
    failing the parser."""
    parser = Http1Parser(is_request=True)
    parser.feed(b"GET / HTTP/1.1\r\nContent-Length: \xb2\r\n\r\n", 0)
    assert parser.error == "invalid content-length"
