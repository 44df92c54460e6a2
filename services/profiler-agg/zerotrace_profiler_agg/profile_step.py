"""profiler-agg's step: one raw message in, derived.profile and derived.device messages (or a
dead letter) out. Stack samples and GPU API calls go to the profile fold (profile_fold.py), GPU
device samples and RDMA counters to the device windows (device_windows.py).

A Step (zerotrace/step.py): the faust shell (distributed) and the embedded runner of
`zerotrace run` drive it alike. Apart from the codec's registry look-ups it is pure: no clock is
read (a dead letter is stamped with its message's own time), so the same messages in the same
order give byte-identical output messages in both shells. None of its calls blocks; only the
codec raises (ValueError: a bug, not input).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zerotrace import names
from zerotrace.bus import Message
from zerotrace.codec import AvroCodec
from zerotrace.deadletter import dead_letter
from zerotrace.errors import PoisonInput
from zerotrace.step import Held, Output, StepCounters
from zerotrace_profiler_agg.device_windows import DeviceWindows
from zerotrace_profiler_agg.profile_fold import ProfileFold
from zerotrace_profiler_agg.settings import MS, ProfilerAggSettings

CONSUMER = names.GROUP_PROFILER_AGG
INPUT_TOPICS = (
    names.RAW_STACK.name,
    names.RAW_GPU.name,
    names.RAW_GPUMETRICS.name,
    names.RAW_RDMA.name,
)


class ProfileStep:
    input_topics = INPUT_TOPICS

    def __init__(self, codec: AvroCodec, settings: ProfilerAggSettings | None = None) -> None:
        self._codec = codec
        s = settings or ProfilerAggSettings()
        self.group = s.group
        self.fold = ProfileFold(s)
        # One Holds for both folds: `held()` is the oldest claim of either. A device window
        # closes at the tick once the collector's delay (the tick lag) is past its end.
        self.devices = DeviceWindows(s.device_window_ms * MS, s.tick_lag_ms * MS, self.fold.holds)
        self.step_counters = StepCounters()

    def process(self, message: Message) -> list[Output]:
        self.step_counters.consumed += 1
        try:
            record, datum = self._codec.decode(message.value)
            source = (message.topic, message.partition)
            self.fold.holds.took((source, message.offset))
            return self.process_record(record, datum, message.topic, source)
        except PoisonInput as exc:
            self.step_counters.dead_letters += 1
            topic, key, value = dead_letter(
                self._codec, message, self.group, exc.reason, message.timestamp_ms * MS
            )
            return [Output(topic, key, value)]

    def process_record(
        self,
        record: str,
        datum: Mapping[str, Any],
        where: str = "a record",
        source: tuple[str, int] = ("record", 0),
    ) -> list[Output]:
        """A decoded raw record: the same logic without the bytes (replays, tests).
        source: (topic, partition) it was read from."""
        if record == names.RAW_STACK.record:
            return self._encode(self.fold.add_stack(datum, source))
        if record == names.RAW_GPU.record:
            return self._encode(self.fold.add_gpu(datum, source))
        if record == names.RAW_GPUMETRICS.record:
            return self._encode_devices(self.devices.add_gpu(datum))
        if record == names.RAW_RDMA.record:
            return self._encode_devices(self.devices.add_rdma(datum))
        raise PoisonInput(f"{where} carries {record}, which profiler-agg does not take")

    def tick(self, now_ns: int) -> list[Output]:
        self.fold.holds.took(None)
        return self._encode(self.fold.tick(now_ns)) + self._encode_devices(
            self.devices.tick(now_ns)
        )

    def flush(self, now_ns: int = 0, reason: str = "end of input") -> list[Output]:
        """End of input: every open window and every snapshot still due."""
        self.fold.holds.took(None)
        outputs = self._encode(self.fold.flush()) + self._encode_devices(self.devices.flush())
        self.fold.holds.clear()
        return outputs

    def held(self) -> Held:
        return self.fold.holds.held()

    def counters(self) -> dict[str, int]:
        return {
            **self.step_counters.as_dict(),
            **self.fold.counters(),
            **self.devices.counters(),
        }

    def _encode(self, windows: list[dict[str, Any]]) -> list[Output]:
        self.step_counters.produced += len(windows)
        topic = names.DERIVED_PROFILE
        return [
            Output(topic.name, str(w["service"]).encode(), self._codec.encode(topic.record, w))
            for w in windows
        ]

    def _encode_devices(self, windows: list[dict[str, Any]]) -> list[Output]:
        self.step_counters.produced += len(windows)
        topic = names.DERIVED_DEVICE
        return [
            Output(topic.name, str(w["node_id"]).encode(), self._codec.encode(topic.record, w))
            for w in windows
        ]
