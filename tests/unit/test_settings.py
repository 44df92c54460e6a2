"""Typed settings: values from an environment mapping, converted by the default's type,
explicit overrides first, one-line errors naming the variable, secrets hidden in describe.
Both settings.py modules: the shared one and profiler-agg's own."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerotrace import names
from zerotrace.errors import ConfigError
from zerotrace.settings import CommonSettings, describe, load, setting
from zerotrace_profiler_agg.gpu_fold import DEFAULT_QUIET_WINDOWS
from zerotrace_profiler_agg.gpu_memory import DEFAULT_CAPACITY
from zerotrace_profiler_agg.settings import ProfilerAggSettings

pytestmark = pytest.mark.unit


@dataclasses.dataclass(frozen=True)
class Demo:
    name: str = setting("ZT_DEMO_NAME", "demo", "A name.")
    workers: int = setting("ZT_DEMO_WORKERS", 4, "How many workers.")
    ratio: float = setting("ZT_DEMO_RATIO", 0.5, "A fraction.")
    verbose: bool = setting("ZT_DEMO_VERBOSE", False, "Say more.")
    folder: Path = setting("ZT_DEMO_FOLDER", Path("/var/lib/demo"), "Where state goes.")
    token: str = setting("ZT_DEMO_TOKEN", "", "An API token.", secret=True)


def test_an_empty_environment_gives_the_defaults() -> None:
    assert load(Demo, {}) == Demo()
    assert load(Demo, {"UNRELATED": "1", "zt_demo_workers": "9"}) == Demo()  # names are exact


def test_values_are_converted_by_the_defaults_type() -> None:
    env = {
        "ZT_DEMO_NAME": "prod",
        "ZT_DEMO_WORKERS": "16",
        "ZT_DEMO_RATIO": "0.25",
        "ZT_DEMO_VERBOSE": "yes",
        "ZT_DEMO_FOLDER": "/tmp/zt",
        "ZT_DEMO_TOKEN": "s3cret",
    }
    got = load(Demo, env)
    assert got == Demo("prod", 16, 0.25, True, Path("/tmp/zt"), "s3cret")
    assert type(got.workers) is int and type(got.ratio) is float
    assert isinstance(got.folder, Path)


def test_a_float_setting_takes_a_whole_number() -> None:
    got = load(Demo, {"ZT_DEMO_RATIO": "2"})
    assert got.ratio == 2.0 and type(got.ratio) is float


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("1", True),
        ("true", True),
        ("TRUE", True),
        ("Yes", True),
        ("0", False),
        ("false", False),
        ("False", False),
        ("NO", False),
    ],
)
def test_booleans_take_the_usual_spellings_in_any_case(raw: str, value: bool) -> None:
    assert load(Demo, {"ZT_DEMO_VERBOSE": raw}).verbose is value


@pytest.mark.parametrize(
    ("env", "kind"),
    [
        ("ZT_DEMO_VERBOSE", "bool"),
        ("ZT_DEMO_WORKERS", "int"),
        ("ZT_DEMO_RATIO", "float"),
    ],
)
@pytest.mark.parametrize("raw", ["", "on", "2x", "lots"])
def test_a_malformed_value_is_one_line_naming_variable_value_and_type(
    env: str, kind: str, raw: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load(Demo, {env: raw})
    message = str(caught.value)
    assert message == f"{env}={raw!r} is not a valid {kind}"
    assert "\n" not in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_a_boolean_is_not_read_as_a_number() -> None:
    # bool is an int in Python: "2" must not become True through int().
    with pytest.raises(ConfigError, match="not a valid bool"):
        load(Demo, {"ZT_DEMO_VERBOSE": "2"})


def test_strings_and_paths_are_taken_as_given() -> None:
    got = load(Demo, {"ZT_DEMO_NAME": "", "ZT_DEMO_FOLDER": "relative/dir"})
    assert got.name == "" and got.folder == Path("relative/dir")


def test_overrides_win_over_the_environment_and_none_means_not_given() -> None:
    env = {"ZT_DEMO_WORKERS": "16", "ZT_DEMO_NAME": "from-env"}
    got = load(Demo, env, workers=2, name=None)
    assert got.workers == 2 and got.name == "from-env"
    # A falsy override is still an override.
    assert load(Demo, env, workers=0, verbose=False).workers == 0
    # Overrides are not converted: the caller already has typed values.
    assert load(Demo, {}, folder=Path("/x")).folder == Path("/x")


def test_without_a_mapping_the_process_environment_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ZT_DEMO_WORKERS", "7")
    monkeypatch.delenv("ZT_DEMO_NAME", raising=False)
    got = load(Demo)
    assert got.workers == 7 and got.name == "demo"
    assert load(Demo, {}).workers == 4  # an explicit mapping is the only source


def test_describe_shows_every_setting_with_its_meaning_and_hides_secrets() -> None:
    lines = describe(load(Demo, {"ZT_DEMO_TOKEN": "s3cret", "ZT_DEMO_WORKERS": "3"}))
    assert lines == [
        "ZT_DEMO_NAME=demo  # A name.",
        "ZT_DEMO_WORKERS=3  # How many workers.",
        "ZT_DEMO_RATIO=0.5  # A fraction.",
        "ZT_DEMO_VERBOSE=False  # Say more.",
        "ZT_DEMO_FOLDER=/var/lib/demo  # Where state goes.",
        "ZT_DEMO_TOKEN=***  # An API token.",
    ]
    assert not any("s3cret" in line for line in lines)
    # An unset secret shows as unset, so a person sees that it is missing.
    assert describe(Demo())[-1] == "ZT_DEMO_TOKEN=  # An API token."


@given(st.integers(-(2**70), 2**70))
def test_any_integer_round_trips_through_its_variable(value: int) -> None:
    assert load(Demo, {"ZT_DEMO_WORKERS": str(value)}).workers == value


def test_common_settings_name_every_variable_once_with_a_meaning() -> None:
    fields = dataclasses.fields(CommonSettings)
    envs = [f.metadata["env"] for f in fields]
    assert len(set(envs)) == len(envs)
    assert all(env.startswith("ZEROTRACE_") for env in envs)
    assert all(f.metadata["doc"].strip() for f in fields)
    # Every password and token, and only those, is hidden when settings are shown.
    secrets = {f.name for f in fields if f.metadata["secret"]}
    assert secrets == {f.name for f in fields if f.name.endswith(("_password", "_token"))}
    assert {"opensearch_password", "api_token"} <= secrets


def test_common_settings_load_from_their_variables() -> None:
    env = {
        "ZEROTRACE_NODE_ID": "node-7",
        "ZEROTRACE_HOME": "/srv/zt",
        "ZEROTRACE_KAFKA": "kafka:9092",
        "ZEROTRACE_KAFKA_PORT": "19092",
        "ZEROTRACE_OPENSEARCH_PASSWORD": "hunter2",
    }
    common = load(CommonSettings, env)
    assert common.node_id == "node-7" and common.home == Path("/srv/zt")
    assert common.kafka == "kafka:9092" and common.kafka_port == 19092
    assert common.opensearch_port == CommonSettings().opensearch_port
    assert "ZEROTRACE_OPENSEARCH_PASSWORD=***" in "\n".join(describe(common))
    assert "hunter2" not in "\n".join(describe(common))
    with pytest.raises(dataclasses.FrozenInstanceError):
        common.kafka = "elsewhere"  # type: ignore[misc]
    with pytest.raises(ConfigError, match="ZEROTRACE_KAFKA_PORT"):
        load(CommonSettings, {"ZEROTRACE_KAFKA_PORT": "ninety-two"})


def test_profiler_agg_settings_load_from_their_own_variables() -> None:
    """The other settings.py (zerotrace_profiler_agg.settings): its variables apart from the
    common ones, its defaults the fold's own bounds."""
    fields = dataclasses.fields(ProfilerAggSettings)
    envs = [f.metadata["env"] for f in fields]
    assert all(env.startswith("ZEROTRACE_PROFILE_") for env in envs)
    assert len(set(envs)) == len(envs)
    assert not set(envs) & {f.metadata["env"] for f in dataclasses.fields(CommonSettings)}
    assert all(f.metadata["doc"].strip() for f in fields)
    defaults = load(ProfilerAggSettings, {})
    assert defaults.group == names.GROUP_PROFILER_AGG
    assert (defaults.live_allocations, defaults.quiet_windows) == (
        DEFAULT_CAPACITY,
        DEFAULT_QUIET_WINDOWS,
    )
    agg = load(
        ProfilerAggSettings,
        {"ZEROTRACE_PROFILE_WINDOW_MS": "2500", "ZEROTRACE_PROFILE_GROUP": "replay-1"},
    )
    assert (agg.window_ms, agg.group, agg.lateness_ms) == (2500, "replay-1", defaults.lateness_ms)
    assert "ZEROTRACE_PROFILE_WINDOW_MS=2500  # " in "\n".join(describe(agg))
    with pytest.raises(ConfigError, match="ZEROTRACE_PROFILE_LATENESS_MS"):
        load(ProfilerAggSettings, {"ZEROTRACE_PROFILE_LATENESS_MS": "2s"})


def test_collector_settings_keep_content_off_unless_asked() -> None:
    from zerotrace_collector.settings import CollectorSettings

    assert load(CollectorSettings, {}).keep_content is False
    assert load(CollectorSettings, {"ZEROTRACE_KEEP_CONTENT": "1"}).keep_content
    assert load(CollectorSettings, {}, keep_content=True).keep_content
