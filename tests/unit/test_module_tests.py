"""Every module keeps unit tests named after it (STYLE.md rule 2: the test and the doc share the
stem). A module of lib/zerotrace, cli/zerotrace_cli or services/*/zerotrace_* is covered by a
`test_<stem>.py` anywhere under tests/ (which must import or name that very module where two
modules share the stem: settings.py, errors.py), or by the test file TESTED_UNDER gives for
it. A module that only runs with root, a GPU or a server, and that no test covers by name, is
listed in NOT_UNIT_TESTABLE with the reason. Both mappings stay sorted, current and honest: a
mapped test file exists and imports or names its module, and a module with a test named
after it is in neither mapping."""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SOURCE_GLOBS = (
    "lib/zerotrace/**/*.py",
    "cli/zerotrace_cli/**/*.py",
    "services/*/zerotrace_*/**/*.py",
)
TEST_FOLDERS = ("unit", "contract", "integration", "kernel", "e2e")

# Modules whose tests live in a file named otherwise (a contract suite, the tests of the
# pipeline a module is one stage of, the kernel test of a probe): the file that covers each.
TESTED_UNDER: dict[str, str] = {
    "lib/zerotrace/bus.py": "tests/contract/bus_contract.py",
    "lib/zerotrace/infra/kafka_node.py": "tests/unit/test_infra_units.py",
    "lib/zerotrace/schema_registry.py": "tests/unit/test_codec.py",
    "lib/zerotrace/schema_registry_kafka.py": "tests/integration/test_schemas_kafka.py",
    "lib/zerotrace/spool_file.py": "tests/unit/test_spool.py",
    "lib/zerotrace/spooling_producer.py": "tests/unit/test_spool.py",
    "lib/zerotrace/store.py": "tests/contract/store_contract.py",
    "services/collector/zerotrace_collector/packets/analysis.py": (
        "tests/unit/test_pcap_analysis.py"
    ),
    "services/collector/zerotrace_collector/packets/capture_file.py": "tests/unit/test_pcap.py",
    "services/collector/zerotrace_collector/packets/captured.py": "tests/unit/test_pcap.py",
    "services/collector/zerotrace_collector/packets/decode.py": "tests/unit/test_packet_decode.py",
    "services/collector/zerotrace_collector/packets/flows_to_records.py": (
        "tests/unit/test_packet_records.py"
    ),
    "services/collector/zerotrace_collector/packets/frames.py": "tests/unit/test_packet_decode.py",
    "services/collector/zerotrace_collector/packets/link.py": "tests/unit/test_packet_decode.py",
    "services/collector/zerotrace_collector/packets/skip.py": "tests/unit/test_packet_decode.py",
    "services/collector/zerotrace_collector/packets/tcp.py": "tests/unit/test_packet_decode.py",
    "services/collector/zerotrace_collector/probes/fileio.py": "tests/kernel/test_fileio_probe.py",
    "services/collector/zerotrace_collector/probes/gpu.py": "tests/kernel/test_gpu_probe.py",
    "services/collector/zerotrace_collector/probes/profile.py": (
        "tests/unit/test_profile_program.py"
    ),
    "services/collector/zerotrace_collector/probes/python_stack.py": (
        "tests/unit/test_kernel_btf.py"
    ),
    "services/collector/zerotrace_collector/probes/socket.py": "tests/kernel/test_socket_probe.py",
    "services/collector/zerotrace_collector/probes/socket_kernel.py": (
        "tests/unit/test_kernel_btf.py"
    ),
    # Both ways of reading the ring (mapped, libbpf) and the budget edge need a real program.
    "services/collector/zerotrace_collector/probes/socket_ring.py": (
        "tests/kernel/test_socket_shedding.py"
    ),
    "services/collector/zerotrace_collector/probes/socket_table.py": (
        "tests/kernel/test_socket_probe.py"
    ),
    "services/collector/zerotrace_collector/probes/tls.py": "tests/kernel/test_tls_probe.py",
    "services/collector/zerotrace_collector/profile_feed.py": "tests/kernel/test_profile_probe.py",
    "services/collector/zerotrace_collector/records.py": "tests/unit/test_collector_records.py",
    "services/collector/zerotrace_collector/symbols/elf_cache.py": "tests/unit/test_elf_symbols.py",
    "services/collector/zerotrace_collector/symbols/elf_sections.py": (
        "tests/unit/test_elf_symbols.py"
    ),
    "services/collector/zerotrace_collector/symbols/process_state.py": (
        "tests/unit/test_symbolizer.py"
    ),
    "services/correlator/zerotrace_correlator/fileio_spans.py": (
        "tests/unit/test_correlator_pipeline.py"
    ),
    "services/correlator/zerotrace_correlator/pipeline.py": (
        "tests/unit/test_correlator_pipeline.py"
    ),
    "services/correlator/zerotrace_correlator/proto_records.py": (
        "tests/unit/test_proto_conversation.py"
    ),
    "services/correlator/zerotrace_correlator/protocols.py": (
        "tests/unit/test_proto_conversation.py"
    ),
    "services/profiler-agg/zerotrace_profiler_agg/profile_fold.py": (
        "tests/unit/test_profile_fold_properties.py"
    ),
    "services/query/zerotrace_query/documents.py": "tests/unit/test_llm_query_documents.py",
    "services/query/zerotrace_query/grpc_api.py": "tests/unit/test_query_service.py",
    "services/query/zerotrace_query/http_api.py": "tests/unit/test_query_service.py",
    "services/query/zerotrace_query/indexer.py": "tests/unit/test_query_service.py",
    "services/query/zerotrace_query/llm_stats.py": "tests/unit/test_llm_query_stats.py",
    "services/query/zerotrace_query/profile_search.py": "tests/unit/test_profile_query_api.py",
}

# Modules that need root, a GPU or a server, that no test covers by name either, and why.
# Empty: every probe and every server-side module has a kernel or integration test above.
NOT_UNIT_TESTABLE: dict[str, str] = {}


def is_module(path: str) -> bool:
    """Hand-written modules: not package markers, entry points or generated gRPC stubs."""
    name = path.rsplit("/", 1)[-1]
    return name not in ("__init__.py", "__main__.py") and "_pb2" not in name


def module_name(path: str) -> str:
    """`services/collector/zerotrace_collector/packets/ip.py` -> `zerotrace_collector.packets.ip`"""
    parts = path.removesuffix(".py").split("/")
    first = next(i for i, part in enumerate(parts) if part.startswith("zerotrace"))
    return ".".join(parts[first:])


def refers_to(source: str, module: str) -> bool:
    """Does this test source import `module` (`import m`, `from m import x`, `from package
    import stem`) or name it (its dotted name, or its path, in a docstring or a string)?"""
    package, _, stem = module.rpartition(".")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            if any(a.name == module or a.name.startswith(f"{module}.") for a in node.names):
                return True
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == module or node.module.startswith(f"{module}."):
                return True
            if node.module == package and any(a.name == stem for a in node.names):
                return True
    dotted = re.escape(module)
    path = re.escape(module.replace(".", "/")) + r"\.py"
    return re.search(rf"(?<![\w.]){dotted}(?!\w)|(?<![\w/]){path}", source) is not None


def uncovered(
    modules: Mapping[str, str], tests: Mapping[str, str], mapped: Mapping[str, str]
) -> list[str]:
    """Paths of the modules (path -> dotted name) that no test covers: neither a
    `test_<stem>.py` among `tests` (path -> source), which must refer to the module when
    another module has the same stem, nor a mapped test file that exists and refers to it."""
    stems = Counter(module.rpartition(".")[2] for module in modules.values())
    out = []
    for path, module in sorted(modules.items()):
        stem = module.rpartition(".")[2]
        own = [source for test, source in tests.items() if test.endswith(f"/test_{stem}.py")]
        if own and (stems[stem] == 1 or any(refers_to(source, module) for source in own)):
            continue
        test = mapped.get(path)
        if test is not None and test in tests and refers_to(tests[test], module):
            continue
        out.append(path)
    return out


def tree_modules() -> dict[str, str]:
    paths = {str(path.relative_to(ROOT)) for pattern in SOURCE_GLOBS for path in ROOT.glob(pattern)}
    return {path: module_name(path) for path in sorted(paths) if is_module(path)}


def tree_tests() -> dict[str, str]:
    return {
        str(path.relative_to(ROOT)): path.read_text()
        for folder in TEST_FOLDERS
        for path in sorted((ROOT / "tests" / folder).rglob("*.py"))
    }


MODULES = tree_modules()
TESTS = tree_tests()


def test_the_detector_on_an_inline_example() -> None:
    modules = {
        "lib/zerotrace/a.py": "zerotrace.a",
        "services/s/zerotrace_s/a.py": "zerotrace_s.a",  # the same stem as the one above
        "lib/zerotrace/b.py": "zerotrace.b",
        "lib/zerotrace/c.py": "zerotrace.c",
        "lib/zerotrace/d.py": "zerotrace.d",
        "lib/zerotrace/e.py": "zerotrace.e",
    }
    tests = {
        "tests/unit/test_a.py": "from zerotrace.a import f\n",  # the shared library's a only
        "tests/kernel/test_b.py": '"""Runs the b probe."""\n',  # a stem of one: enough
        "tests/contract/c_contract.py": "from zerotrace import c\n",
        "tests/unit/test_other.py": '"""Runs zerotrace.d end to end."""\n',
        "tests/unit/test_s_a.py": "from zerotrace_s import a\n",
    }
    mapped = {
        "lib/zerotrace/c.py": "tests/contract/c_contract.py",
        "lib/zerotrace/d.py": "tests/unit/test_gone.py",  # a mapped file must exist
        "services/s/zerotrace_s/a.py": "tests/unit/test_a.py",  # and refer to its module
    }
    assert uncovered(modules, tests, mapped) == [
        "lib/zerotrace/d.py",
        "lib/zerotrace/e.py",
        "services/s/zerotrace_s/a.py",
    ]
    mapped["lib/zerotrace/d.py"] = "tests/unit/test_other.py"  # names it: enough
    mapped["services/s/zerotrace_s/a.py"] = "tests/unit/test_s_a.py"
    assert uncovered(modules, tests, mapped) == ["lib/zerotrace/e.py"]
    tests["tests/unit/test_e.py"] = "def test_nothing() -> None:\n    pass\n"
    assert uncovered(modules, tests, mapped) == []


@pytest.mark.parametrize(
    ("source", "module", "refers"),
    [
        ("import zerotrace_collector.packets.ip\n", "zerotrace_collector.packets.ip", True),
        (
            "from zerotrace_collector.packets import ip, tcp\n",
            "zerotrace_collector.packets.ip",
            True,
        ),
        ("from zerotrace.infra.maven import require_java\n", "zerotrace.infra.maven", True),
        ("def f():\n    from zerotrace.clock import ManualClock\n", "zerotrace.clock", True),
        ("from zerotrace.bus_memory import InMemoryBroker\n", "zerotrace.bus", False),
        ("from zerotrace import bus_memory\n", "zerotrace.bus", False),
        ('"""Covers zerotrace_cli.run_view."""\n', "zerotrace_cli.run_view", True),
        (
            '"""See zerotrace_collector/feed_memory.py."""\n',
            "zerotrace_collector.feed_memory",
            True,
        ),
        ('"""See zerotrace.busy."""\n', "zerotrace.bus", False),
        ('"""See x.zerotrace.bus."""\n', "zerotrace.bus", False),
        ("from zerotrace_collector.errors import MalformedEvent\n", "zerotrace.errors", False),
    ],
)
def test_what_counts_as_referring_to_a_module(source: str, module: str, refers: bool) -> None:
    assert refers_to(source, module) is refers


def test_module_names_and_what_counts_as_a_module() -> None:
    assert module_name("lib/zerotrace/infra/maven.py") == "zerotrace.infra.maven"
    assert module_name("services/profiler-agg/zerotrace_profiler_agg/settings.py") == (
        "zerotrace_profiler_agg.settings"
    )
    assert not is_module("cli/zerotrace_cli/__main__.py")
    assert not is_module("services/query/zerotrace_query/api/query_pb2_grpc.py")
    assert is_module("cli/zerotrace_cli/run_cmd.py")


def test_the_tree_has_modules_and_tests_to_check() -> None:
    assert "lib/zerotrace/holds.py" in MODULES and "tests/unit/test_holds.py" in TESTS
    assert not any(path.endswith("__init__.py") or "_pb2" in path for path in MODULES)


def test_every_module_has_tests_named_after_it_or_mapped() -> None:
    missing = [
        path for path in uncovered(MODULES, TESTS, TESTED_UNDER) if path not in NOT_UNIT_TESTABLE
    ]
    assert missing == [], "write tests/unit/test_<stem>.py, or map the test that covers it"


def test_every_mapped_test_file_exists_and_refers_to_its_module() -> None:
    wrong = {
        path: test
        for path, test in TESTED_UNDER.items()
        if test not in TESTS or path not in MODULES or not refers_to(TESTS[test], MODULES[path])
    }
    assert wrong == {}


def test_the_mappings_are_sorted_current_and_apart() -> None:
    for mapping in (TESTED_UNDER, NOT_UNIT_TESTABLE):
        assert list(mapping) == sorted(mapping)
        assert set(mapping) <= set(MODULES), "a mapped module that no longer exists"
    assert not set(TESTED_UNDER) & set(NOT_UNIT_TESTABLE)
    # A module with a test named after it needs no entry: a stale one is dropped.
    named = set(MODULES) - set(uncovered(MODULES, TESTS, {}))
    assert named.isdisjoint(TESTED_UNDER), "mapped, yet it has test_<stem>.py: drop the entry"
    assert named.isdisjoint(NOT_UNIT_TESTABLE)
    assert all(reason.strip() for reason in NOT_UNIT_TESTABLE.values())
