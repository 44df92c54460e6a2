"""GET one route of a running query service's HTTP API, for the commands that read it
(`spans`, `profile`, `gpu-report --api`), with its failures explained in one line:

- the service answered with an error: ConfigError "<refused>: <why>", where <why> is the
  `error` of the service's JSON error body, else the HTTP reason ("Not Found");
- no service answered (refused, unreachable, timed out): TransientIO
  "no query service at <base> (<why>)<hint>", the hint saying how to start one.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from zerotrace.errors import ConfigError, TransientIO
from zerotrace_query.api_auth import client_headers

TIMEOUT_S = 60.0


def fetch(
    base: str,
    path: str,
    params: Mapping[str, Any],
    token: str = "",
    *,
    timeout_s: float = TIMEOUT_S,
    refused: str = "",
    hint: str = "",
) -> bytes:
    """The body of GET <base><path>?<params> (a "/" ending `base` is dropped), with the
    bearer `token` when one is given ("" = none). `refused`: the ConfigError's words before
    ": <why>" (default "the query service at <base> refused"); `hint`: what the TransientIO
    adds after "(<why>)"."""
    url = f"{base.rstrip('/')}{path}?{urlencode(params)}"
    request = urllib.request.Request(url, headers=client_headers(token))
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body: bytes = response.read()
            return body
    except urllib.error.HTTPError as exc:
        with exc:
            why = refusal_reason(exc.read(), str(exc.reason))
        raise ConfigError(f"{refused or f'the query service at {base} refused'}: {why}") from None
    except (urllib.error.URLError, OSError) as exc:
        why = f"{getattr(exc, 'reason', exc)}"  # URLError's reason, else the OSError itself
        raise TransientIO(f"no query service at {base} ({why}){hint}") from None


def refusal_reason(body: bytes, reason: str) -> str:
    """Why the service refused: the `error` of its JSON error body ({"error": "..."}), else
    `reason` (the HTTP reason phrase)."""
    try:
        answer = json.loads(body)
    except ValueError:
        return reason
    return str(answer.get("error", reason)) if isinstance(answer, dict) else reason
