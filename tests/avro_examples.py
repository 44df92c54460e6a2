"""Example data for any Avro schema, for round-trip tests of every record in schemas/."""

from __future__ import annotations

import random
from typing import Any


def example(schema: Any, rng: random.Random) -> Any:
    if isinstance(schema, list):  # union: pick a branch, null included
        return example(rng.choice(schema), rng)
    if isinstance(schema, str):
        return _primitive(schema, rng)
    kind = schema["type"]
    if kind == "record":
        return {f["name"]: example(f["type"], rng) for f in schema["fields"]}
    if kind == "enum":
        return rng.choice(schema["symbols"])
    if kind == "array":
        return [example(schema["items"], rng) for _ in range(rng.randint(0, 3))]
    if kind == "map":
        return {f"k{i}": example(schema["values"], rng) for i in range(rng.randint(0, 3))}
    return _primitive(kind, rng)


def _primitive(kind: str, rng: random.Random) -> Any:
    return {
        "null": None,
        "boolean": rng.random() < 0.5,
        "int": rng.randint(-(2**31), 2**31 - 1),
        "long": rng.randint(-(2**63), 2**63 - 1),
        "double": rng.uniform(-1e6, 1e6),
        "float": float(rng.randint(-1000, 1000)),
        "string": "".join(rng.choice("abcé/._- 语") for _ in range(rng.randint(0, 12))),
        "bytes": bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 12))),
    }[kind]
