"""The Prometheus text format writer: exact text, escaping, Go's number form, and what
prometheus_client's own parser reads back."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from zerotrace_query.prometheus_text import (
    CONTENT_TYPE,
    HistogramFamily,
    SampleFamily,
    Series,
    escape_help,
    escape_label_value,
    number,
    prometheus_name,
    render,
    render_samples,
    sanitize,
)

pytestmark = pytest.mark.unit

AWKWARD = 'x"y\\z\nw'  # a quote, a backslash and a line feed: all three escapes
FAMILY = HistogramFamily(
    name="demo_seconds",
    help="A demo.\nSecond line with a \\ backslash.",
    bounds=(0.5, 1.0, 1048576.0),
    series=(
        Series((("a", AWKWARD), ("b", "")), (1, 2, 2), 3, 4.25),
        Series((), (0, 0, 1), 1, 2e6),
    ),
)


def test_exact_text_of_a_small_family() -> None:
    assert render([FAMILY, HistogramFamily("empty", "Nothing yet.", (1.0,), ())]) == (
        "# HELP demo_seconds A demo.\\nSecond line with a \\\\ backslash.\n"
        "# TYPE demo_seconds histogram\n"
        'demo_seconds_bucket{a="x\\"y\\\\z\\nw",le="0.5"} 1\n'
        'demo_seconds_bucket{a="x\\"y\\\\z\\nw",le="1.0"} 2\n'
        'demo_seconds_bucket{a="x\\"y\\\\z\\nw",le="1.048576e+06"} 2\n'
        'demo_seconds_bucket{a="x\\"y\\\\z\\nw",le="+Inf"} 3\n'
        'demo_seconds_sum{a="x\\"y\\\\z\\nw"} 4.25\n'
        'demo_seconds_count{a="x\\"y\\\\z\\nw"} 3\n'
        'demo_seconds_bucket{le="0.5"} 0\n'
        'demo_seconds_bucket{le="1.0"} 0\n'
        'demo_seconds_bucket{le="1.048576e+06"} 1\n'
        'demo_seconds_bucket{le="+Inf"} 1\n'
        "demo_seconds_sum 2e+06\n"
        "demo_seconds_count 1\n"
        "# HELP empty Nothing yet.\n"
        "# TYPE empty histogram\n"
    )
    assert CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"


def test_prometheus_client_parses_it_back() -> None:
    families = list(text_string_to_metric_families(render([FAMILY])))
    assert [(f.name, f.type, f.documentation) for f in families] == [
        ("demo_seconds", "histogram", FAMILY.help)
    ]
    samples = [(s.name, s.labels, s.value) for s in families[0].samples]
    labelled = {"a": AWKWARD}  # unescaped exactly; the empty label is absent
    assert samples[:6] == [
        ("demo_seconds_bucket", {**labelled, "le": "0.5"}, 1.0),
        ("demo_seconds_bucket", {**labelled, "le": "1.0"}, 2.0),
        ("demo_seconds_bucket", {**labelled, "le": "1.048576e+06"}, 2.0),
        ("demo_seconds_bucket", {**labelled, "le": "+Inf"}, 3.0),
        ("demo_seconds_sum", labelled, 4.25),
        ("demo_seconds_count", labelled, 3.0),
    ]
    assert samples[9:] == [
        ("demo_seconds_bucket", {"le": "+Inf"}, 1.0),
        ("demo_seconds_sum", {}, 2e6),
        ("demo_seconds_count", {}, 1.0),
    ]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.001, "0.001"),
        (1.0, "1.0"),
        (1, "1.0"),
        (81.92, "81.92"),
        (262144, "262144.0"),
        (999999.5, "999999.5"),
        (1e6, "1e+06"),
        (1048576, "1.048576e+06"),
        (67108864, "6.7108864e+07"),
        (1e-05, "1e-05"),
        (0.0, "0.0"),
        (-2.5e6, "-2500000.0"),
        (math.inf, "+Inf"),
        (-math.inf, "-Inf"),
        (math.nan, "NaN"),
    ],
)
def test_numbers_as_go_prints_them(value: float, text: str) -> None:
    assert number(value) == text


@given(st.floats(allow_nan=False) | st.integers(min_value=0, max_value=2**53))
def test_numbers_match_prometheus_client(value: float) -> None:
    assert number(value) == floatToGoString(value)  # type: ignore[no-untyped-call]


def test_escaping() -> None:
    assert escape_label_value('a\\b"c\nd') == 'a\\\\b\\"c\\nd'
    assert escape_label_value("plain é ✓") == "plain é ✓"
    assert escape_help('say "hi"\\\n') == 'say "hi"\\\\\\n'  # quotes stay in HELP


def test_names() -> None:
    name = "gen_ai.server.time_to_first_token"
    assert prometheus_name(name, "s") == "gen_ai_server_time_to_first_token_seconds"
    assert prometheus_name("gen_ai.client.token.usage", "{token}") == "gen_ai_client_token_usage"
    assert prometheus_name("io.read_bytes", "By") == "io_read_bytes"
    assert prometheus_name("x.duration_seconds", "s") == "x_duration_seconds"
    with pytest.raises(ValueError, match="unit 'furlong'"):
        prometheus_name("x", "furlong")
    assert sanitize("zerotrace.observation_point") == "zerotrace_observation_point"
    assert sanitize("a-b c/d") == "a_b_c_d"
    assert sanitize("1st") == "_1st"


@pytest.mark.parametrize(
    "series",
    [
        Series((), (2, 1, 1), 1, 0.0),  # falls
        Series((), (0, 1, 2), 1, 0.0),  # count below the last bucket
        Series((), (0, 1), 1, 0.0),  # a bucket short
    ],
)
def test_buckets_that_are_not_cumulative_are_refused(series: Series) -> None:
    family = HistogramFamily("bad", "Bad.", (1.0, 2.0, 3.0), (series,))
    with pytest.raises(ValueError, match="not cumulative"):
        render([family])


def test_sample_families_print_their_name_as_given() -> None:
    # A counter under dcgm-exporter's name keeps it (no `_total` added); zerotrace's own
    # counters carry theirs; empty label values are left out; an int prints exactly.
    families = [
        SampleFamily("DCGM_FI_X", "A count.", "counter", (((("gpu", "0"), ("UUID", "")), 2**60),)),
        SampleFamily("zerotrace_x_total", "Another.", "counter", (((("a", "b"),), 1.5),)),
    ]
    assert render_samples(families) == (
        "# HELP DCGM_FI_X A count.\n"
        "# TYPE DCGM_FI_X counter\n"
        'DCGM_FI_X{gpu="0"} 1152921504606846976\n'
        "# HELP zerotrace_x_total Another.\n"
        "# TYPE zerotrace_x_total counter\n"
        'zerotrace_x_total{a="b"} 1.5\n'
    )
