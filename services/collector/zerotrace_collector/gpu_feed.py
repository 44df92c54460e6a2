"""The GPU feed: CUDA allocation, free and launch calls as ``raw.gpu`` records.

Each :class:`GpuCallSample` of the probe becomes one ``zerotrace.raw.GpuApiEvent`` with
its calling stack, root first, ending in ``cuda:<api>``::

    thread:<tid>, py:<caller chain> ..., native:<frames below Python> ..., cuda:cudaMalloc

The record builder (:func:`gpu_api_record`) and the frame assembly
(:func:`calling_frames`) are pure; :class:`GpuFeed` only reads stacks from the probe and
names them through the injected symbolizer.

Approximation: on-GPU kernel time is not measured (no CUPTI here); a launch record carries
the host-side call's start and end, and profiles count launches per calling stack.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

from zerotrace import names
from zerotrace_collector.cgroup import ContainerIds, container_id_of
from zerotrace_collector.feeds import RawRecord
from zerotrace_collector.probes.event_layout import PyStatus
from zerotrace_collector.probes.gpu import GpuProbe
from zerotrace_collector.probes.gpu_decode import GpuCallSample
from zerotrace_collector.python_procs import process_start_time
from zerotrace_collector.python_symbols import PythonSymbols
from zerotrace_collector.python_threads import ThreadStateRefill
from zerotrace_collector.service_cache import ServiceCache, service_of
from zerotrace_collector.stack_merge import call_sites, merge_stack

__all__ = ["GpuFeed", "UserSymbolizer", "calling_frames", "gpu_api_record"]

_UNKNOWN: Final = "native:[unknown]"


class UserSymbolizer(Protocol):
    """What the feed needs of :class:`zerotrace_collector.symbols.Symbolizer`."""

    def user_frames(self, pid: int, addresses: Sequence[int]) -> list[str]: ...
    def forget(self, pid: int) -> None: ...


def calling_frames(
    tid: int,
    api: str,
    native_leaf_first: Sequence[str],
    python_root_first: Sequence[str] = (),
    interpreter_module: str | None = None,
) -> list[str]:
    """The call's stack, root first, ending in ``cuda:<api>``.

    *native_leaf_first* are the symbolized user stack addresses as the probe took them at
    the API's entry: the first is the API function itself (replaced by ``cuda:<api>``).
    The frame-pointer walk goes astray in code built without frame pointers (libffi,
    CPython): from the first address outside every mapping (``native:[unknown]``) on,
    frames are dropped as garbage. Python frames and native ones merge as in
    :func:`~zerotrace_collector.stack_merge.merge_stack`.
    """
    native = list(native_leaf_first[1:])
    for i, frame in enumerate(native):
        if frame.startswith(_UNKNOWN):
            native = native[:i]
            break
    stack = merge_stack(tid, python_root_first, native, (), interpreter_module)
    return [*stack, f"cuda:{api}".replace(";", ":")]


def gpu_api_record(
    call: GpuCallSample,
    frames: Sequence[str],
    node_id: str,
    mono_to_epoch_ns: int,
    container_id: str | None,
    service: str | None = None,
) -> dict[str, Any]:
    """The ``zerotrace.raw.GpuApiEvent`` datum of one call (pure).

    *mono_to_epoch_ns* turns the probe's CLOCK_MONOTONIC times into epoch ns; it is
    measured once by the collector so records of a replay stay identical."""
    start_ns = call.start_mono_ns + mono_to_epoch_ns
    return {
        # pid, tid, entry time and API identify one call on one node.
        "event_id": f"{node_id}/{call.pid}/{call.tid}/{start_ns}/{call.api.symbol}",
        "node_id": node_id,
        "pid": call.pid,
        "tid": call.tid,
        "process_name": call.comm,
        "service": service,
        "container_id": container_id,
        "api": call.api.symbol,
        "start_ns": start_ns,
        "end_ns": call.end_mono_ns + mono_to_epoch_ns,
        "address": _signed64(call.address),
        "size": _signed64(call.size),
        "result": _signed32(call.result),
        "stack_id": None,
        "frames": list(frames),
    }


def _signed64(value: int) -> int:
    """Avro longs are signed; an address above 2**63 keeps its bits."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _signed32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


class GpuFeed:
    """GPU API calls for ``raw.gpu``, keyed by pid (a process's allocations and frees meet
    on one partition, in order).

    *symbolizer* names native addresses (a :class:`~zerotrace_collector.symbols.Symbolizer`),
    *python_symbols* Python frames; *container_of* maps a pid to its container id, *services*
    names its service. Every *sweep_s* seconds of *clock*, what is held for processes that
    exited is dropped.
    """

    name = "gpu"

    def __init__(
        self,
        probe: GpuProbe,
        node_id: str,
        mono_to_epoch_ns: int,
        symbolizer: UserSymbolizer,
        *,
        python_symbols: PythonSymbols | None = None,
        container_of: Callable[[int], str | None] = container_id_of,
        services: ServiceCache | None = None,
        clock: Callable[[], float] = time.monotonic,
        sweep_s: float = 5.0,
        max_stacks: int = 16_384,
        thread_walk_s: float = 2.0,
    ) -> None:
        self.probe = probe
        self.follows = probe.follow
        self._node_id = node_id
        self._offset_ns = mono_to_epoch_ns
        self._symbolizer = symbolizer
        self._py = python_symbols or PythonSymbols()
        self._containers = ContainerIds(container_of)
        self._services = services
        self._clock = clock
        self._sweep_s = sweep_s
        self._swept_at = clock()
        # Calls repeat a few stacks (a launch loop): a hit skips both symbolizers.
        self._stacks: dict[tuple[Any, ...], list[str]] = {}
        self._max_stacks = max_stacks
        self._not_python: set[int] = set()
        self._thread_states = ThreadStateRefill(
            probe.add_thread_states, every_s=thread_walk_s, clock=clock
        )
        self.counts: Counter[str] = Counter()

    def attach(self) -> None:
        self.probe.attach()

    def _count_python(self, call: GpuCallSample) -> None:
        if call.py_status == PyStatus.READ_FAIL:
            self.counts["py_read_fail"] += 1
        elif call.py_status == PyStatus.NO_THREAD:
            self.counts["py_no_thread"] += 1
            # Past the walker's reach (64 threads): the thread's next calls find its state.
            if self._thread_states.no_thread(self.probe.python.get(call.pid)):
                self.counts["py_thread_walks"] += 1

    def _python_frames(self, call: GpuCallSample) -> list[str]:
        proc = self.probe.python.get(call.pid)
        if proc is None:
            return []
        return self._py.frames(proc, call.py_frames)

    def frames_of(self, call: GpuCallSample) -> list[str]:
        """The call's frames, root first, ending in ``cuda:<api>``."""
        self._count_python(call)
        user = tuple(self.probe.user_stack(call))
        key = (call.pid, call.tid, call.api.id, call.py_frames, user)
        cached = self._stacks.get(key)
        if cached is not None:
            return cached
        proc = self.probe.python.get(call.pid)
        native = self._symbolizer.user_frames(call.pid, call_sites(user)) if user else []
        frames = calling_frames(
            call.tid,
            call.api.symbol,
            native,
            self._python_frames(call),
            proc.module_name if proc else None,
        )
        if len(self._stacks) >= self._max_stacks:
            self._stacks.clear()  # cheaper than an LRU; refilled by the next few calls
        self._stacks[key] = frames
        return frames

    def poll(self, timeout_ms: int) -> list[RawRecord]:
        calls = self.probe.poll(timeout_ms)
        # A process that loaded CUDA before it was followed, or through a path known
        # already, was not seen at a library open: learn whether it is Python now, so its
        # next calls carry Python frames.
        for pid in {c.pid for c in calls} - self.probe.python.keys() - self._not_python:
            if self.probe.learn_python(pid) is None:
                self._not_python.add(pid)
        for call in calls:  # Python code objects first, while their processes live
            proc = self.probe.python.get(call.pid)
            if proc is not None and call.py_frames:
                self._py.read_ahead(proc, call.py_frames)
        out = []
        for call in calls:
            datum = gpu_api_record(
                call,
                self.frames_of(call),
                self._node_id,
                self._offset_ns,
                self._containers.of(call.pid),
                service_of(self._services, call.pid, call.comm),
            )
            out.append(
                RawRecord(names.RAW_GPU.name, str(call.pid).encode(), names.RAW_GPU.record, datum)
            )
        if self._clock() - self._swept_at >= self._sweep_s:
            self._swept_at = self._clock()
            self._sweep()
        return out

    def _sweep(self) -> None:
        self._not_python.clear()  # a pid may be reused by a Python process
        for pid, known in list(self.probe.python.items()):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    start = process_start_time(f.read())
            except (OSError, ValueError, IndexError):
                self.counts["process_exited"] += 1
            else:
                if start == known.start_time:
                    continue
                self.counts["pid_reused"] += 1  # another process: learnt again on its calls
            self._stacks.clear()
            self._containers.forget(pid)
            if self._services is not None:
                self._services.forget(pid)
            self.probe.forget_python(pid)
            self._thread_states.forget(pid)
            self._py.forget(pid)
            self._symbolizer.forget(pid)

    def counters(self) -> dict[str, int]:
        out = self.probe.counters()
        out.update(self.counts)
        out.update(self._py.counts)
        return out

    def follow_pid(self, pid: int) -> None:
        """Trace *pid* and what it forks from now on (the probe also reads its Python)."""
        self.probe.follow_pid(pid)

    def close(self) -> None:
        self.probe.close()
        self._py.close()
