"""The collector's settings, from the environment (the CLI's flags override them)."""

from __future__ import annotations

import dataclasses

from zerotrace.settings import setting


@dataclasses.dataclass(frozen=True)
class CollectorSettings:
    keep_content: bool = setting(
        "ZEROTRACE_KEEP_CONTENT",
        False,
        "Publish prompt and completion text as captured (off: masked with same-length filler, "
        "as OpenTelemetry's GenAI conventions capture message content only on request); "
        "credentials are masked either way.",
    )
