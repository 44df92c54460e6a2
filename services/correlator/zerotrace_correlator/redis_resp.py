"""Redis spans of one connection: RESP2 and RESP3 commands paired with their replies. Pure.

Redis answers a connection's commands in the order they came, one reply each, so a pipeline
of N commands is N replies, paired FIFO. Not everything the server sends is a reply:
- RESP3 push messages (`>`: pub/sub messages, client-tracking invalidations) come between
  replies and answer nothing;
- the confirmations of SUBSCRIBE-like commands are one per channel (pushes in RESP3, arrays
  in RESP2); the command's span ends at its last expected one, the rest are skipped;
- a RESP2 connection in subscriber mode (after a confirmation counting subscriptions > 0)
  gets `message` arrays that answer nothing;
- after CLIENT REPLY OFF, or for the command after CLIENT REPLY SKIP, nothing comes: those
  commands are given at once as spans without a reply.
The database index (db.namespace) is tracked per connection: it changes when a SELECT is
answered without an error (and goes back to 0 on RESET). redis_resp_reader.py frames the
values; this module pairs them and names them.

db.query.text is the command as redis-cli would show it, with every argument after the
command name (and the subcommand of a container command: CLIENT SETNAME, CONFIG GET) as `?`;
`keep_text=True` keeps the arguments (each cut at KEEP_BYTES), except passwords (AUTH, HELLO
AUTH, MIGRATE AUTH/AUTH2, ACL SETUSER password rules, CONFIG SET of requirepass/masterauth),
which are always `?`. The command name is kept as sent: OpenTelemetry asks for no case
normalisation.

Bounded: besides the readers' limits, at most MAX_PENDING_COMMANDS commands wait for replies,
each with a db.query.text of at most MAX_QUERY_TEXT_CHARS. Past that, commands are counted
(OVERFLOW_COMMANDS) and their replies skipped in order, so later pairs stay right.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from zerotrace import names
from zerotrace_correlator.protocol_span import REQUEST, AttributeValue, ProtoSpan, Side, Status
from zerotrace_correlator.redis_resp_reader import KEEP_BYTES, MAX_LINE_BYTES, Message, RespReader

# Commands waiting for their replies. Clients pipeline tens to hundreds (redis-benchmark -P 16,
# redis-py pipelines of a few hundred); a bulk load (`redis-cli --pipe`) sends millions, which
# become counts past this. Each waiting command holds its text: 1024 x 1 KiB at most.
MAX_PENDING_COMMANDS = 1024
# db.query.text is cut here (with "…"): the command, its subcommand and the first arguments
# tell what ran; an MSET of thousands of keys needs no thousands of "?".
MAX_QUERY_TEXT_CHARS = 1024
# Arguments read from a command with keep_text (a prefix of KEEP_BYTES each): 64 x 129 bytes
# is what a reader holds at most for one command; MAX_QUERY_TEXT_CHARS fills before that.
MAX_KEPT_ARGS = 64
_ARGS_READ = 3  # without keep_text: the name, a subcommand or index, CLIENT REPLY's mode
_REPLY_ITEMS_READ = 3  # a push's kind, its channel, its subscription count

# Counter names (`counters`): limits hit and messages skipped.
PUSH_MESSAGES = "push_messages"  # RESP3 pushes answering no command (pub/sub, tracking)
PUBSUB_MESSAGES = "pubsub_messages"  # RESP2 subscriber-mode messages, extra confirmations
UNPAIRED_REPLIES = "unpaired_replies"  # no command waited (joined mid-connection, MONITOR)
OVERFLOW_COMMANDS = "overflow_commands"  # over MAX_PENDING_COMMANDS: no span
SKIPPED_REPLIES = "skipped_replies"  # the replies of those commands
UNANSWERED_COMMANDS = "unanswered_commands"  # CLIENT REPLY OFF or SKIP: a span, no reply
CUT_QUERY_TEXTS = "cut_query_texts"  # MAX_QUERY_TEXT_CHARS, MAX_KEPT_ARGS or KEEP_BYTES

_PUSH, _ARRAY, _ERROR, _BULK_ERROR = ord(">"), ord("*"), ord("-"), ord("!")
# Redis's container commands (COMMAND LIST's `|` names): the subcommand names the operation.
_CONTAINERS = frozenset(
    b"ACL CLIENT CLUSTER COMMAND CONFIG FUNCTION LATENCY MEMORY MODULE OBJECT PUBSUB SCRIPT "
    b"SLOWLOG XGROUP XINFO".split()
)
_SUBSCRIBING = {
    name: name.lower()
    for name in b"SUBSCRIBE PSUBSCRIBE SSUBSCRIBE UNSUBSCRIBE PUNSUBSCRIBE SUNSUBSCRIBE".split()
}
_CONFIRMATIONS = frozenset(_SUBSCRIBING.values())
_PUBSUB_KINDS = _CONFIRMATIONS | {b"message", b"pmessage", b"smessage"}
_PROCEDURES = frozenset(b"EVALSHA EVALSHA_RO FCALL FCALL_RO".split())  # sha1 or function
_SECRETS = frozenset(b"requirepass masterauth".split())  # CONFIG SET parameters
_PASSWORD_RULES = (b">", b"<", b"#", b"!")
_ERROR_CODE = re.compile(rb"[A-Z][A-Z0-9_-]{0,31}")
_PLAIN_ARG = re.compile(rb"[!#-&(-~]+")  # printable, no space or quote: shown bare
_NUMBER = re.compile(rb"[0-9]{1,10}")

# A first request: an array of bulk strings, or an inline command line (telnet, nc, health
# checks) starting with a command that a first request uses and no other line protocol does
# (memcached shares get/set/quit; HTTP shares GET).
_FIRST_ARRAY = re.compile(rb"\*[1-9][0-9]{0,9}\r\n\$[1-9]")
_FIRST_INLINE = frozenset(
    b"PING AUTH HELLO SELECT INFO ECHO CLIENT COMMAND CONFIG MONITOR SUBSCRIBE PSUBSCRIBE DBSIZE "
    b"KEYS SCAN EXISTS FLUSHALL FLUSHDB ROLE CLUSTER READONLY REPLCONF PSYNC SYNC".split()
)
_NOT_INLINE = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|HTTP/")


def recognise(first_request_bytes: bytes) -> bool:
    """Does a connection's first request start like a Redis command? An array of bulk strings
    (`*<n>\\r\\n$<len>`, at least 6 bytes), or a whole inline line starting with a command
    in _FIRST_INLINE. Never true for HTTP/1.x (a request line holds "HTTP/"), TLS (0x16),
    nor the length-prefixed binary protocols (PostgreSQL, MySQL, Kafka, DNS)."""
    data = first_request_bytes
    if _FIRST_ARRAY.match(data):
        return True
    newline = data.find(b"\n", 0, MAX_LINE_BYTES)
    if newline < 0:
        return False
    line = data[:newline]
    words = line.split()
    return bool(words) and words[0].upper() in _FIRST_INLINE and not _NOT_INLINE.search(line)


@dataclass(slots=True)
class _Command:
    name: str  # db.operation.name and the span name: "GET", "CLIENT SETNAME"
    text: str
    procedure: str  # db.stored_procedure.name: EVALSHA's sha1, FCALL's function
    start_ns: int
    request_bytes: int
    effect: Literal["", "select", "reset"] = ""
    select: int | None = None  # SELECT's index
    pubsub: bytes = b""  # the confirmation kind a SUBSCRIBE-like command waits for
    confirmations: int = 0
    response_bytes: int = 0


class RedisParser:
    """A ProtocolParser for Redis: commands on the REQUEST side, replies on the RESPONSE side.
    `db_index` is the database the connection starts in: 0 for a connection seen from its
    start, None (db.namespace left out) for one joined mid-way."""

    protocol = names.PROTOCOL_REDIS

    def __init__(self, keep_text: bool = False, db_index: int | None = 0) -> None:
        self.keep_text = keep_text
        self._db = db_index
        self._requests = RespReader(True, MAX_KEPT_ARGS if keep_text else _ARGS_READ)
        self._replies = RespReader(False, _REPLY_ITEMS_READ)
        # Waiting commands, oldest first; an int is a run of that many overflowed commands.
        self._pending: deque[_Command | int] = deque()
        self._held = 0  # _Command entries in _pending
        self._reply_off = False  # CLIENT REPLY OFF
        self._skip_next = False  # CLIENT REPLY SKIP
        self._subscribed = False  # RESP2 subscriber mode
        self._error = ""
        self._closed = False
        self._counters: dict[str, int] = {}

    @property
    def error(self) -> str:
        return self._error

    @property
    def counters(self) -> Mapping[str, int]:
        return self._counters

    def buffered_bytes(self) -> int:
        """Bytes the readers hold, at most max_buffered_bytes(): about 129 KiB, 137 KiB with
        keep_text. Waiting commands add at most MAX_PENDING_COMMANDS texts."""
        return self._requests.buffered_bytes() + self._replies.buffered_bytes()

    def max_buffered_bytes(self) -> int:
        return self._requests.max_buffered + self._replies.max_buffered

    def pending_commands(self) -> int:
        return self._held

    def feed(self, side: Side, data: bytes, start_ns: int, end_ns: int) -> list[ProtoSpan]:
        out: list[ProtoSpan] = []
        if self._error or self._closed or not data:
            return out
        reader = self._requests if side == REQUEST else self._replies
        for message in reader.feed(data, start_ns, end_ns):
            if side == REQUEST:
                self._command(message.items, message.count, message.start_ns, message.size, out)
            else:
                self._reply(message, out)
        if reader.error:
            self._error = f"{'request' if side == REQUEST else 'reply'}: {reader.error}"
        return out

    def close(self, now_ns: int) -> list[ProtoSpan]:
        """Every command still waiting, as an incomplete span ending now; the error state, if
        any, does not hide commands read before it (they carry its reason)."""
        out = [
            self._span(cmd, "incomplete", max(now_ns, cmd.start_ns), "")
            for cmd in self._pending
            if isinstance(cmd, _Command)
        ]
        self._pending.clear()
        self._held = 0
        self._closed = True
        self._requests.drop()
        self._replies.drop()
        return out

    # -- commands -------------------------------------------------------------------------

    def _command(
        self, items: list[bytes | None], count: int, start_ns: int, size: int,
        out: list[ProtoSpan],
    ) -> None:  # fmt: skip
        args = [item or b"" for item in items]
        upper = args[0].upper()
        second = args[1].upper() if count > 1 else b""
        answered = not (self._reply_off or self._skip_next)
        self._skip_next = False
        mode = args[2].upper() if upper == b"CLIENT" and second == b"REPLY" and count == 3 else b""
        if mode == b"ON" or upper == b"RESET":
            self._reply_off, answered = False, True
        elif mode == b"OFF":
            self._reply_off, answered = True, False
        elif mode == b"SKIP":
            self._skip_next, answered = not self._reply_off, False
        if answered and self._held >= MAX_PENDING_COMMANDS:
            self._count(OVERFLOW_COMMANDS)
            if upper in (b"SELECT", b"RESET"):
                self._db = None  # its effect is unknown from here
            if self._pending and isinstance(self._pending[-1], int):
                self._pending[-1] += 1
            else:
                self._pending.append(1)
            return
        name = _text(args[0])
        if upper in _CONTAINERS and count > 1:
            name = f"{name} {_text(args[1])}"
        cmd = _Command(name, self._query_text(args, count), "", start_ns, size)
        if upper in _PROCEDURES and count > 1:
            cmd.procedure = _text(args[1])
        if upper == b"SELECT":
            cmd.effect = "select"
            cmd.select = int(args[1]) if count == 2 and _NUMBER.fullmatch(args[1]) else None
        elif upper == b"RESET":
            cmd.effect = "reset"
        elif upper in _SUBSCRIBING:
            cmd.pubsub, cmd.confirmations = _SUBSCRIBING[upper], max(1, count - 1)
        if answered:
            self._pending.append(cmd)
            self._held += 1
        else:
            self._count(UNANSWERED_COMMANDS)
            out.append(self._span(cmd, "ok", start_ns, ""))

    def _query_text(self, args: list[bytes], count: int) -> str:
        words = [_text(args[0])]
        fixed = 2 if args[0].upper() in _CONTAINERS and count > 1 else 1
        words += (_text(arg) for arg in args[1:fixed])
        redact = not self.keep_text or args[0].upper() == b"AUTH"
        secret = frozenset() if redact else _secret_positions(args)
        length = sum(map(len, words)) + len(words) - 1
        for at in range(fixed, count):
            if redact or at in secret:
                word = "?"
            elif at < len(args):
                word = _argument(args[at])
            else:  # past MAX_KEPT_ARGS
                word = "…"
            length += len(word) + 1
            if length > MAX_QUERY_TEXT_CHARS or word == "…":
                words.append("…")
                self._count(CUT_QUERY_TEXTS)
                break
            if word.endswith("…"):
                self._count(CUT_QUERY_TEXTS)
            words.append(word)
        return " ".join(words)

    # -- replies --------------------------------------------------------------------------

    def _reply(self, message: Message, out: list[ProtoSpan]) -> None:
        kind_byte, items = message.type, message.items
        first = items[0] if items and kind_byte in (_PUSH, _ARRAY) else None
        kind = first if first in _PUBSUB_KINDS else b""
        head = self._pending[0] if self._pending else None
        if isinstance(head, _Command) and head.pubsub and kind == head.pubsub:
            head.response_bytes += message.size
            head.confirmations -= 1
            self._note_subscriptions(kind_byte, kind, items)
            if head.confirmations == 0:
                self._pop()
                out.append(self._span(head, "ok", message.end_ns, ""))
        elif kind_byte == _PUSH:
            self._count(PUSH_MESSAGES)
        elif kind and self._subscribed:
            self._count(PUBSUB_MESSAGES)
            self._note_subscriptions(kind_byte, kind, items)
        elif head is None:
            self._count(UNPAIRED_REPLIES)
        elif isinstance(head, int):
            self._count(SKIPPED_REPLIES)
            if head > 1:
                self._pending[0] = head - 1
            else:
                self._pending.popleft()
        else:
            self._pop()
            head.response_bytes += message.size
            failed = kind_byte in (_ERROR, _BULK_ERROR)
            code = ""
            if failed:
                word = message.scalar.split(b" ", 1)[0]
                code = word.decode() if _ERROR_CODE.fullmatch(word) else "_OTHER"
            out.append(self._span(head, "error" if failed else "ok", message.end_ns, code))
            if not failed:
                self._apply(head, message.scalar)

    def _note_subscriptions(self, kind_byte: int, kind: bytes, items: list[bytes | None]) -> None:
        """RESP2: a confirmation's third item counts the subscriptions left (a message's is
        its payload)."""
        count = items[2] if len(items) > 2 and kind in _CONFIRMATIONS else None
        if kind_byte == _ARRAY and count is not None and _NUMBER.fullmatch(count):
            self._subscribed = int(count) > 0

    def _apply(self, cmd: _Command, scalar: bytes) -> None:
        if cmd.effect == "select":
            # Inside MULTI the reply is QUEUED and the switch waits for an EXEC we do not
            # follow: the index is unknown until the next SELECT.
            self._db = None if scalar == b"QUEUED" else cmd.select
        elif cmd.effect == "reset":
            self._db, self._subscribed = 0, False

    def _pop(self) -> None:
        self._pending.popleft()
        self._held -= 1

    def _span(self, cmd: _Command, status: Status, end_ns: int, code: str) -> ProtoSpan:
        attributes: dict[str, AttributeValue] = {
            names.ATTR_DB_SYSTEM_NAME: names.PROTOCOL_REDIS,
            names.ATTR_DB_OPERATION_NAME: cmd.name,
            names.ATTR_DB_QUERY_TEXT: cmd.text,
        }
        if self._db is not None:
            attributes[names.ATTR_DB_NAMESPACE] = str(self._db)
        if cmd.procedure:
            attributes[names.ATTR_DB_STORED_PROCEDURE_NAME] = cmd.procedure
        if code and code != "_OTHER":
            attributes[names.ATTR_DB_RESPONSE_STATUS_CODE] = code
        if status == "incomplete" and self._error:
            attributes[names.ATTR_ERROR_MESSAGE] = self._error
        return ProtoSpan(
            protocol=self.protocol,
            name=cmd.name,
            start_ns=cmd.start_ns,
            end_ns=max(end_ns, cmd.start_ns),
            status=status,
            attributes=attributes,
            error_type=code,
            request_bytes=cmd.request_bytes,
            response_bytes=cmd.response_bytes,
        )

    def _count(self, name: str) -> None:
        self._counters[name] = self._counters.get(name, 0) + 1


def _text(word: bytes) -> str:
    """A command or subcommand name as sent, cut at KEEP_BYTES."""
    return word[:KEEP_BYTES].decode("utf-8", "backslashreplace")


def _argument(arg: bytes) -> str:
    """An argument shown as redis-cli would take it: bare, or quoted with escapes."""
    cut = len(arg) > KEEP_BYTES
    arg = arg[:KEEP_BYTES]
    shown = arg.decode() if _PLAIN_ARG.fullmatch(arg) else repr(arg)[1:]
    return shown + "…" if cut else shown


def _secret_positions(args: list[bytes]) -> frozenset[int]:
    """The arguments that are passwords, kept as `?` even with keep_text."""
    upper = [arg.upper() for arg in args]
    name = upper[0]
    found: set[int] = set()
    if name == b"HELLO":  # HELLO [protover [AUTH username password] [SETNAME name]]
        found.update(
            p for at, word in enumerate(upper) if word == b"AUTH" for p in (at + 1, at + 2)
        )
    elif name == b"MIGRATE":  # ... [AUTH password | AUTH2 username password]
        for at, word in enumerate(upper):
            if word in (b"AUTH", b"AUTH2"):
                found.update(range(at + 1, at + (3 if word == b"AUTH2" else 2)))
    elif name == b"ACL" and upper[1:2] == [b"SETUSER"]:  # >pass <pass #sha256 !sha256
        found.update(at for at, arg in enumerate(args[3:], 3) if arg.startswith(_PASSWORD_RULES))
    elif name == b"CONFIG" and upper[1:2] == [b"SET"]:  # CONFIG SET parameter value ...
        found.update(at + 1 for at in range(2, len(args), 2) if args[at].lower() in _SECRETS)
    return frozenset(found)
