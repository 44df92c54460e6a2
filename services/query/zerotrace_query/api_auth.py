"""Who may ask the query service: one bearer token (ZEROTRACE_API_TOKEN; empty = anyone).

A client sends `Authorization: Bearer <token>` (HTTP) or the same value as the `authorization`
metadata (gRPC); both servers compare it in constant time (hmac.compare_digest), so the time an
answer takes tells nothing about how much of a guess was right.

A browser cannot add a header to the page it opens, nor to the script and style it loads, so
the web page takes the token once in its address (`/?token=...` or `/flamegraph?token=...`):
the server checks it, answers 303 to the same page without it (the address bar and the history
keep no token), and sets a cookie the browser sends with the page, its assets and its fetches
from then on. The cookie is HttpOnly (no script reads it), SameSite=Strict (another site's page
cannot make the browser send it) and holds a value derived from the token, not the token: it
opens the web page and the JSON API of this server, never gRPC. /healthz stays open (health
probes carry no credentials; it answers only "ok").

Pure functions: the HTTP and gRPC servers call them in one line each.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from urllib.parse import parse_qsl, urlencode

from zerotrace.errors import ConfigError

TOKEN_ENV = "ZEROTRACE_API_TOKEN"
METADATA_KEY = "authorization"  # gRPC metadata keys are lower case
COOKIE = "zerotrace_session"
PAGE_TOKEN_PARAM = "token"
OPEN_PATHS = frozenset({"/healthz"})
DENIED = (
    f"missing or wrong bearer token: send 'Authorization: Bearer <{TOKEN_ENV}>' "
    f"(a browser: open the page once as /?token=<{TOKEN_ENV}>)"
)
# Printable ASCII without spaces: what an HTTP header and gRPC metadata carry unchanged.
_TOKEN = re.compile(r"[\x21-\x7e]*")
_PAGE_TOKEN_IN_TEXT = re.compile(rf"(?<=[?&]{PAGE_TOKEN_PARAM}=)[^&\s\"]*")


def check_token(token: str) -> str:
    """The token, when a header can carry it; ConfigError in one line otherwise."""
    if not _TOKEN.fullmatch(token):
        raise ConfigError(f"{TOKEN_ENV} must be printable ASCII without spaces")
    return token


def _same(offered: str, expected: str) -> bool:
    return hmac.compare_digest(offered.encode("utf-8", "surrogateescape"), expected.encode())


def token_ok(token: str, offered: str) -> bool:
    """Is `offered` this (non-empty) token? Compared in constant time."""
    return bool(token) and _same(offered, token)


def bearer_ok(token: str, authorization: str | None) -> bool:
    """Does an Authorization header (or gRPC metadata value) carry this token? The scheme is
    case-insensitive (RFC 7235)."""
    scheme, _, offered = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and token_ok(token, offered.strip())


def session_value(token: str) -> str:
    """The web page's cookie value: derived from the token, useless as a bearer token."""
    return hmac.new(token.encode(), b"zerotrace web session", hashlib.sha256).hexdigest()


def session_ok(token: str, cookie_header: str | None) -> bool:
    """Does a Cookie header carry the session cookie of this token?"""
    for pair in (cookie_header or "").split(";"):
        name, _, value = pair.strip().partition("=")
        if name == COOKIE and token and _same(value, session_value(token)):
            return True
    return False


def allowed(token: str, path: str, authorization: str | None, cookie: str | None) -> bool:
    """May a request for `path` with these headers be answered? Always, without a token."""
    if not token or path in OPEN_PATHS:
        return True
    return bearer_ok(token, authorization) or session_ok(token, cookie)


def session_cookie(token: str) -> str:
    """The Set-Cookie value a page answers with once it was opened with the right token."""
    return f"{COOKIE}={session_value(token)}; Path=/; HttpOnly; SameSite=Strict"


def page_token(query_string: str) -> tuple[str, str] | None:
    """(token offered in a page address, the rest of the query string), or None."""
    pairs = parse_qsl(query_string, keep_blank_values=True)
    offered = [value for name, value in pairs if name == PAGE_TOKEN_PARAM]
    if not offered:
        return None
    return offered[-1], urlencode([(n, v) for n, v in pairs if n != PAGE_TOKEN_PARAM])


def redact(text: str) -> str:
    """A request line or log message with the value of any `token=` parameter hidden."""
    return _PAGE_TOKEN_IN_TEXT.sub("***", text)


def client_headers(token: str) -> dict[str, str]:
    """HTTP headers a client sends: none without a token."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def client_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """gRPC metadata a client sends: none without a token."""
    return ((METADATA_KEY, f"Bearer {token}"),) if token else ()
