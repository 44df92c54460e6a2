"""The service name of a process (pure): what its users call it, from its command line, its
comm, its cgroup path and the user's mapping (``ZEROTRACE_SERVICE_NAMES``).

The first of these that gives a name wins:

1. The mapping: ``pattern=name`` entries, the first whose shell glob matches the process's
   comm, the name derived below, or its whole command line (arguments joined by spaces).
2. The entry point, where the program is an interpreter or a launcher whose own name says
   little: ``python -m vllm.entrypoints.openai.api_server`` -> that module;
   ``python /opt/llama/server.py`` -> ``server``; ``uvicorn app.main:app`` (and gunicorn,
   hypercorn, daphne) -> ``app.main``; ``celery -A proj worker`` -> ``proj``; ``torchrun
   train.py`` -> ``train``; ``java -jar x.jar`` -> ``x``; ``node server.js`` -> ``server``;
   ``bash run.sh`` -> ``run``; a Ray worker's title ``ray::Actor.method`` -> ``ray::Actor``.
3. The systemd unit of its cgroup: ``/system.slice/vllm.service`` -> ``vllm`` (named scopes too;
   login sessions, ``run-*`` transient units and containers' scopes are not names).
4. The program's file name, unless it is an interpreter or a shell: ``llama-server``, and the
   whole ``text-generation-launcher`` where comm keeps 15 characters.
5. The container, from the cgroup path alone (no runtime API is asked): Kubernetes
   ``pod/<pod uid>/<container id, 12>``, else ``<runtime>/<container id, 12>`` (docker, podman,
   containerd, cri-o).
6. The program's file name, else comm (a process that is gone keeps its comm).

So a ``python3 -c ...`` in a container is named by the container, and ``python3 -m vllm...``
in one by its module.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from zerotrace.errors import ConfigError

__all__ = [
    "ServiceRule",
    "entry_point",
    "parse_service_names",
    "record_service",
    "service_from_cgroup",
    "service_name",
    "split_cmdline",
]

SETTING: Final = "ZEROTRACE_SERVICE_NAMES"


@dataclass(frozen=True)
class ServiceRule:
    pattern: str  # a shell glob (fnmatch, case-sensitive)
    name: str


def parse_service_names(text: str) -> tuple[ServiceRule, ...]:
    """``pattern=name,pattern=name``: entries split at commas, each at its last ``=`` (a
    command line may hold ``=``, a name may not); blanks around them are dropped. Raises
    ConfigError with one line."""
    rules = []
    for entry in text.split(","):
        entry = entry.strip()
        if not entry:
            continue
        pattern, sep, name = entry.rpartition("=")
        pattern, name = pattern.strip(), name.strip()
        if not sep or not pattern or not name or any(c.isspace() for c in name):
            raise ConfigError(f"{SETTING}: {entry!r} is not pattern=name (name without blanks)")
        rules.append(ServiceRule(pattern, name))
    return tuple(rules)


def split_cmdline(raw: bytes) -> list[str]:
    """/proc/PID/cmdline as arguments. A process that rewrote its title (setproctitle: Ray
    workers, gunicorn) leaves one string with blanks: it is split at them."""
    args = [a for a in raw.decode("utf-8", "replace").split("\0")]
    while args and not args[-1]:
        args.pop()
    if len(args) == 1 and " " in args[0]:
        args = args[0].split()
    return args


_PYTHON = re.compile(r"^(?:python|pypy)[0-9.]*[a-z]?$")
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "busybox"})
_NODE = frozenset({"node", "nodejs", "bun", "deno"})
_ASGI = frozenset({"uvicorn", "gunicorn", "hypercorn", "daphne", "granian"})
_LAUNCHERS = frozenset({"torchrun", "torch.distributed.run", "deepspeed", "accelerate"})
_GENERIC = _SHELLS | _NODE | frozenset({"java", "env", "ray"})
# Options of python that take the next argument.
_PYTHON_ARG_OPTIONS = frozenset("WX")
_PYTHON_LONG_ARG_OPTIONS = frozenset({"--check-hash-based-pycs"})
_JAVA_ARG_OPTIONS = frozenset(
    {"-cp", "-classpath", "--class-path", "-p", "--module-path", "--add-modules",
     "--add-opens", "--add-exports", "--add-reads", "--upgrade-module-path"}
)  # fmt: skip
_NODE_ARG_OPTIONS = frozenset({"-r", "--require", "--import", "--loader", "--experimental-loader"})
_SHELL_ARG_OPTIONS = frozenset({"-o", "+o", "-O", "+O"})
# ``module:attr`` or a factory ``module:create()``: what ASGI/WSGI servers are given.
_APP = re.compile(r"^\[?([A-Za-z_][\w.]*):[A-Za-z_][\w.]*(?:\(.*\))?\]?$")
# Names that tell nothing: the folder above says more (``dist/index.js`` -> its project).
_BLAND_STEMS = frozenset({"index", "main", "__main__", "cli"})
_BLAND_DIRS = frozenset({"dist", "build", "lib", "src", "bin", "out", ""})


def _basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def _stem(path: str) -> str:
    base = _basename(path)
    stem = base.rsplit(".", 1)[0] if "." in base[1:] else base
    if stem in _BLAND_STEMS:
        parts = [p for p in path.split("/")[:-1] if p not in _BLAND_DIRS and p != "."]
        if parts:
            return parts[-1]
    return stem


def _python(args: Sequence[str]) -> str | None:
    """The module or script a python command line runs, launchers looked through."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--" or not arg.startswith("-") or arg == "-":
            break
        if arg in _PYTHON_LONG_ARG_OPTIONS:
            i += 2
            continue
        if arg.startswith("--"):
            i += 1
            continue
        for j, flag in enumerate(arg[1:], start=1):
            rest = arg[j + 1 :]
            if flag == "c":
                return None
            if flag == "m":
                module = rest or (args[i + 1] if i + 1 < len(args) else "")
                after = args[i + 1 :] if rest else args[i + 2 :]
                return _through(module, after) if module else None
            if flag in _PYTHON_ARG_OPTIONS:
                i += 0 if rest else 1
                break
        i += 1
    if i < len(args) and args[i] == "--":
        i += 1
    if i >= len(args) or args[i] == "-":
        return None
    script = args[i]
    return _through(_stem(script), args[i + 1 :])


def _through(name: str, rest: Sequence[str]) -> str:
    """*name* is what python runs; a launcher's own target names the service better."""
    inner = _launched(name, rest)
    return inner if inner else name


def _app_module(args: Sequence[str]) -> str | None:
    found = None
    for i, arg in enumerate(args):
        match = _APP.match(arg)
        if match is None:
            continue
        after_flag = i > 0 and args[i - 1].startswith("-") and "=" not in args[i - 1]
        if not after_flag:
            return match.group(1)
        found = found or match.group(1)  # maybe an option's value: kept as a last resort
    return found


def _celery(args: Sequence[str]) -> str | None:
    for i, arg in enumerate(args):
        if arg in ("-A", "--app") and i + 1 < len(args):
            return args[i + 1].split(":", 1)[0]
        for prefix in ("--app=", "-A"):
            if arg.startswith(prefix) and len(arg) > len(prefix):
                return arg[len(prefix) :].lstrip("=").split(":", 1)[0]
    return None


def _script_launcher(args: Sequence[str]) -> str | None:
    for arg in args:
        if arg.endswith(".py") and not arg.startswith("-"):
            return _stem(arg.split("=", 1)[-1])
    return None


def _launched(name: str, rest: Sequence[str]) -> str | None:
    if name in _ASGI:
        return _app_module(rest)
    if name == "celery":
        return _celery(rest)
    if name in _LAUNCHERS:
        return _script_launcher(rest)
    return None


def _java(args: Sequence[str]) -> str | None:
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-jar" and i + 1 < len(args):
            return _stem(args[i + 1])
        if arg in ("-m", "--module") and i + 1 < len(args):
            return args[i + 1].split("/", 1)[0]
        if arg in _JAVA_ARG_OPTIONS:
            i += 2
            continue
        if not arg.startswith("-"):
            return arg
        i += 1
    return None


def _script_after_options(
    args: Sequence[str], arg_options: frozenset[str], inline: str
) -> str | None:
    """The first non-option argument, as a script stem; None when *inline* (``-c``, ``-e``)
    gives the program as text."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in arg_options:
            i += 2
            continue
        if arg.startswith("--") and arg != "--":
            if arg in ("--eval", "--print"):
                return None
            i += 1
            continue
        if arg.startswith("-") and len(arg) > 1 and arg != "--":
            if any(flag in inline for flag in arg[1:]):
                return None
            i += 1
            continue
        if arg == "--":
            i += 1
            continue
        return _stem(arg)
    return None


def entry_point(argv: Sequence[str]) -> str | None:
    """The name the program's entry point gives (rule 2 of the module doc), or None."""
    if not argv:
        return None
    first = argv[0]
    if first.startswith("ray::"):
        return first.split(".", 1)[0]
    program = _basename(first).rstrip(":")  # gunicorn's title: "gunicorn: master [app:app]"
    rest = argv[1:]
    if _PYTHON.match(program):
        return _python(rest)
    if program in _SHELLS:
        return _script_after_options(rest, _SHELL_ARG_OPTIONS, "c")
    if program in _NODE:
        return _script_after_options(rest, _NODE_ARG_OPTIONS, "ep")
    if program == "java":
        return _java(rest)
    return _launched(program, rest)


# <runtime>-<64 hex>.scope (systemd cgroup driver), /<runtime>/<64 hex> (cgroupfs driver), or
# k3s's <pod slice>:cri-containerd:<64 hex>.
_CONTAINER = re.compile(
    r"(?:^|[/:])(?:(docker|libpod|cri-containerd|crio|nerdctl)[-:]|(docker|libpod)/)?([0-9a-f]{64})"
    r"(?:\.scope)?(?:/|$)"
)
_RUNTIMES: Final = {
    "docker": "docker", "libpod": "podman", "cri-containerd": "containerd",
    "crio": "cri-o", "nerdctl": "containerd",
}  # fmt: skip
# kubepods-burstable-pod<uid with _>.slice (systemd) or /kubepods/burstable/pod<uid> (cgroupfs)
_POD = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
_UNIT = re.compile(r"^(.+)\.(service|scope)$")
_NOT_NAMES = re.compile(r"^(?:user@\d+|session-\w+|run-\w+|init|user-runtime-dir@\d+)$")


def _cgroup_path(cgroup_text: str) -> str:
    """The path to read: v2's (``0::``), else v1's systemd hierarchy, else the first."""
    paths: dict[str, str] = {}
    for line in cgroup_text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            paths.setdefault(parts[1], parts[2])
    for key in ("", "name=systemd"):
        if paths.get(key, "/") not in ("/", ""):
            return paths[key]
    return next((p for p in paths.values() if p not in ("/", "")), "")


def service_from_cgroup(cgroup_text: str) -> tuple[str | None, str | None]:
    """(systemd unit name, container name) from a /proc/PID/cgroup text, each None when the
    path has none (rules 3 and 5 of the module doc)."""
    path = _cgroup_path(cgroup_text)
    container = None
    match = _CONTAINER.search(path)
    if match:
        runtime = _RUNTIMES.get(match.group(1) or match.group(2) or "", "container")
        short = match.group(3)[:12]
        pod = _POD.search(path)
        container = f"pod/{pod.group(1).replace('_', '-')}/{short}" if pod else f"{runtime}/{short}"
    unit = None
    if container is None and "kubepods" not in path:
        for part in reversed(path.split("/")):
            named = _UNIT.match(part)
            if named and not _NOT_NAMES.match(named.group(1)):
                unit = named.group(1)
                break
    return unit, container


def service_name(
    comm: str,
    argv: Sequence[str] = (),
    cgroup_text: str = "",
    rules: Sequence[ServiceRule] = (),
) -> str:
    """The service name of a process (the order of the module doc). *argv* empty: unknown
    (gone, or a kernel thread); *cgroup_text*: /proc/PID/cgroup, "" when unknown."""
    derived = _derived(comm, argv, cgroup_text)
    if rules:
        command = " ".join(argv)
        for rule in rules:
            for subject in (comm, derived, command):
                if subject and fnmatch.fnmatchcase(subject, rule.pattern):
                    return rule.name
    return derived


def _derived(comm: str, argv: Sequence[str], cgroup_text: str) -> str:
    entry = entry_point(argv)
    if entry:
        return entry
    unit, container = service_from_cgroup(cgroup_text) if cgroup_text else (None, None)
    if unit:
        return unit
    program = _basename(argv[0]).rstrip(":") if argv and argv[0] else ""
    generic = not program or program in _GENERIC or bool(_PYTHON.match(program))
    if program and not generic:
        return program
    if container:
        return container
    return program or comm


def record_service(record: Mapping[str, Any]) -> str:
    """A raw record's service: its ``service`` field (collectors that name services), else
    its process name (older collectors, replays of older events)."""
    return str(record.get("service") or record.get("process_name", ""))
