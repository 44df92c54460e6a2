"""probes/event_layout.py and the decoders' struct formats against the C text of bpf/.

A type tag, length, enum member, flag or record field changed on one side only fails here.
Read, then parse: :func:`parse_c` is a pure function over C text, tested on an inline
snippet first; the other tests hand it the files of bpf/. Most records are declared in
bpf/zerotrace_events.h; the profile and GPU records, struct zt_py_stack and the socket
payload maximum are declared next to their programs, so those files are read too, each
with what the loader compiles in front of it.
"""

from __future__ import annotations

import ast
import functools
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

import pytest

from zerotrace_collector.probes import event_layout as layout
from zerotrace_collector.probes.event_layout import (
    DEFAULT_PY_DEPTH,
    DEFAULT_STACK_DEPTH,
    PY_STACK_HEAD,
    ConnKind,
    Direction,
    PyStatus,
    SockOp,
    Source,
    py_stack_size,
)
from zerotrace_collector.probes.fileio_decode import EVENT_STRUCT
from zerotrace_collector.probes.gpu_decode import (
    CALL_STRUCT,
    GPU_APIS,
    LIB_STRUCT,
    ApiKind,
    call_size,
)
from zerotrace_collector.probes.profile_decode import EVENT_HEAD, NEWS_STRUCT, ProfileLayout
from zerotrace_collector.probes.socket_decode import CONN_EVENT, DATA_HEADER

pytestmark = pytest.mark.unit

BPF = Path(__file__).resolve().parents[2] / "bpf"

# ---- the parser -------------------------------------------------------------------------


@dataclass(frozen=True)
class Member:
    ctype: str
    """``u32``, ``char``, ``struct zt_py_stack``."""
    name: str
    dim: str | None
    """The array length as written (``ZT_PATH_MAX``, ``2 * N``); None for a scalar."""


@dataclass(frozen=True)
class CText:
    defines: dict[str, int]
    """Object-like #defines whose value is an integer literal; the first one of a name."""
    enums: dict[str, dict[str, int]]
    """enum tag -> {member: value}."""
    structs: dict[str, tuple[Member, ...]]
    """struct tag -> members; a struct with a member this parser cannot read is left out."""
    pinned: dict[str, str]
    """struct tag -> the size its ``_Static_assert(sizeof(...) == ...)`` pins, as written."""

    @property
    def constants(self) -> dict[str, int]:
        return self.defines | {k: v for members in self.enums.values() for k, v in members.items()}


_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_INT_LITERAL = r"(0[xX][0-9a-fA-F]+|\d+)[uUlL]*"
_DEFINE = re.compile(rf"^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+{_INT_LITERAL}[ \t]*$", re.M)
_ENUM = re.compile(r"\benum\s+(\w+)\s*\{([^}]*)\}")
_ENUMERATOR = re.compile(rf"^(\w+)(?:\s*=\s*{_INT_LITERAL})?$")
_STRUCT = re.compile(r"\bstruct\s+(\w+)\s*\{([^}]*)\}")
_MEMBER = re.compile(r"^(struct\s+\w+|\w+)\s+(\w+)\s*(?:\[([^\]]+)\])?$")
_PIN = re.compile(r"_Static_assert\s*\(\s*sizeof\s*\(\s*struct\s+(\w+)\s*\)\s*==\s*([^,]+),")


def parse_c(text: str) -> CText:
    """The integer #defines, enums, structs and size pins of C source *text*."""
    text = _COMMENT.sub(" ", text)
    defines: dict[str, int] = {}
    for name, value in _DEFINE.findall(text):
        defines.setdefault(name, int(value, 0))
    enums: dict[str, dict[str, int]] = {}
    for tag, body in _ENUM.findall(text):
        members: dict[str, int] = {}
        following = 0
        for entry in filter(None, (e.strip() for e in body.split(","))):
            match = _ENUMERATOR.match(entry)
            if match is None:
                break
            following = int(match[2], 0) if match[2] else following
            members[match[1]], following = following, following + 1
        else:
            enums[tag] = members
    structs: dict[str, tuple[Member, ...]] = {}
    for tag, body in _STRUCT.findall(text):
        matches = [_MEMBER.match(" ".join(m.split())) for m in body.split(";") if m.strip()]
        if all(matches):
            structs[tag] = tuple(Member(m[1], m[2], m[3]) for m in matches if m)
    pinned = {tag: size.strip() for tag, size in _PIN.findall(text)}
    return CText(defines, enums, structs, pinned)


def c_int(expr: str, names: Mapping[str, int]) -> int:
    """An integer constant expression of C: literals, names, + - * / and parentheses."""
    plain = re.sub(rf"\b{_INT_LITERAL}\b", r"\1", expr).strip()  # 16u, 0x10ull
    return _evaluate(ast.parse(plain, mode="eval").body, names)


def _evaluate(node: ast.expr, names: Mapping[str, int]) -> int:
    match node:
        case ast.Constant(value=int() as value):
            return value
        case ast.Name(id=name) if name in names:
            return names[name]
        case ast.BinOp(left=left, op=op, right=right):
            a, b = _evaluate(left, names), _evaluate(right, names)
            match op:
                case ast.Add():
                    return a + b
                case ast.Sub():
                    return a - b
                case ast.Mult():
                    return a * b
                case ast.Div():
                    return a // b
    raise ValueError(f"not an integer constant expression: {ast.unparse(node)}")


# ---- C and Python layouts, as fields ----------------------------------------------------

# C's integer types as struct format codes: size, and signed when lower case.
_C_INTS = {
    "char": "b",
    "u8": "B",
    "s8": "b",
    "u16": "H",
    "s16": "h",
    "u32": "I",
    "s32": "i",
    "int": "i",
    "u64": "Q",
    "s64": "q",
}


@dataclass(frozen=True)
class Field:
    kind: str
    """``u``/``s``: an unsigned/signed integer; ``bytes``: a char or u8 array; ``pad``."""
    size: int


def c_fields(c: CText, tag: str, until: str | None = None) -> list[Field]:
    """The fields of ``struct tag`` up to (not including) member *until*."""
    fields: list[Field] = []
    for m in c.structs[tag]:
        if m.name == until:
            break
        n = 1 if m.dim is None else c_int(m.dim, c.defines)
        if m.ctype.startswith("struct "):
            fields += c_fields(c, m.ctype.split()[1]) * n
            continue
        code = _C_INTS[m.ctype]
        size = struct.calcsize(code)
        if m.name.startswith("_pad"):
            fields.append(Field("pad", size * n))
        elif m.dim is not None and size == 1:
            fields.append(Field("bytes", n))
        else:
            fields += [Field("s" if code.islower() else "u", size)] * n
    return fields


def c_sizeof(c: CText, tag: str, **depths: int) -> int:
    """sizeof(struct tag) by the C rules (each member at a multiple of its alignment);
    *depths* override #defines, as the loader's -D flags do."""
    return _size_and_alignment(c, tag, c.defines | depths)[0]


def _size_and_alignment(c: CText, tag: str, names: Mapping[str, int]) -> tuple[int, int]:
    offset, widest = 0, 1
    for m in c.structs[tag]:
        if m.ctype.startswith("struct "):
            size, align = _size_and_alignment(c, m.ctype.split()[1], names)
        else:
            size = align = struct.calcsize(_C_INTS[m.ctype])
        offset = -(-offset // align) * align
        offset += size * (1 if m.dim is None else c_int(m.dim, names))
        widest = max(widest, align)
    return -(-offset // widest) * widest, widest


_FORMAT_ITEM = re.compile(r"(\d*)([xbBhHiIqQs])")


def py_fields(layout_struct: struct.Struct) -> list[Field]:
    """The fields a little-endian ``struct`` format reads, in the terms of :func:`c_fields`."""
    fmt = layout_struct.format
    items = _FORMAT_ITEM.findall(fmt[1:])
    assert fmt[0] == "<" and "".join(n + code for n, code in items) == fmt[1:], fmt
    fields: list[Field] = []
    for count, code in items:
        n = int(count) if count else 1
        if code in "sx":
            fields.append(Field("bytes" if code == "s" else "pad", n))
        else:
            fields += [Field("s" if code.islower() else "u", struct.calcsize(code))] * n
    return fields


def same_fields(c: list[Field], py: list[Field]) -> bool:
    """Field by field the same; a C pad member may be read as anything of its size."""
    return len(c) == len(py) and all(
        a == b or (a.kind == "pad" and a.size == b.size) for a, b in zip(c, py, strict=True)
    )


def gpu_api_instances(text: str) -> list[tuple[str, str, str]]:
    """(symbol, ZT_API_* name, ZT_KIND_* name) of each ZT_GPU_API(...) line of gpu_calls.c."""
    return re.findall(r"^ZT_GPU_API\((\w+),\s*(\w+),\s*(\w+)\)", text, re.M)


# ---- the parser on inline text ----------------------------------------------------------

SNIPPET = """
#define ZT_COMM_LEN 16 /* a comment */
#ifndef ZT_DEPTH
#define ZT_DEPTH 0x2ull
#endif
#define ZT_EXPR (ZT_COMM_LEN * 2)
#define ZT_FN(x) ((x) + 1)
enum zt_kind {
	ZT_A = 1, /* explicit */
	ZT_B,     // one more than the one before
	ZT_C = 0x10,
};
struct zt_inner {
	u32 a;
	u32 _pad;
};
struct zt_rec {
	u32 type;
	s32 fd;
	char comm[ZT_COMM_LEN];
	struct zt_inner in;
	u64 words[2 * ZT_DEPTH];
};
_Static_assert(sizeof(struct zt_rec) == 32 + 8 * 2 * ZT_DEPTH, "update x.py");
struct zt_odd { u32 bits : 3; };
struct zt_gap { u32 a; u64 b; };
static int f(struct zt_rec *r) { struct zt_inner i = {.a = 1}; return r->fd; }
"""


def test_parse_c_reads_defines_enums_structs_and_pins() -> None:
    c = parse_c(SNIPPET)
    assert c.defines == {"ZT_COMM_LEN": 16, "ZT_DEPTH": 2}  # no expressions, no macros
    assert c.enums == {"zt_kind": {"ZT_A": 1, "ZT_B": 2, "ZT_C": 16}}
    assert c.constants["ZT_B"] == 2
    assert list(c.structs) == ["zt_inner", "zt_rec", "zt_gap"]  # zt_odd has a bit field
    assert c.structs["zt_rec"][2:] == (
        Member("char", "comm", "ZT_COMM_LEN"),
        Member("struct zt_inner", "in", None),
        Member("u64", "words", "2 * ZT_DEPTH"),
    )
    assert c.pinned == {"zt_rec": "32 + 8 * 2 * ZT_DEPTH"}


def test_sizes_and_fields_of_the_snippet() -> None:
    c = parse_c(SNIPPET)
    assert c_sizeof(c, "zt_rec") == c_int(c.pinned["zt_rec"], c.defines) == 64
    assert c_sizeof(c, "zt_rec", ZT_DEPTH=5) == 112
    assert c_sizeof(c, "zt_gap") == 16  # 4 bytes of implicit padding before b
    assert sum(f.size for f in c_fields(c, "zt_gap")) == 12
    rec = c_fields(c, "zt_rec", until="words")
    assert rec == [Field("u", 4), Field("s", 4), Field("bytes", 16), Field("u", 4), Field("pad", 4)]
    assert same_fields(rec, py_fields(struct.Struct("<Ii16sIi")))  # pad read as an int
    assert same_fields(rec, py_fields(struct.Struct("<Ii16sI4x")))
    assert not same_fields(rec, py_fields(struct.Struct("<II16sII")))  # fd's sign
    assert not same_fields(rec, py_fields(struct.Struct("<Ii15sxII")))  # comm's length
    assert not same_fields(rec, py_fields(struct.Struct("<Ii16sI")))  # a field short
    with pytest.raises(ValueError, match="ZT_EXPR"):
        c_int("ZT_EXPR * 2", c.defines)  # not an integer #define
    with pytest.raises(ValueError, match=">>"):
        c_int("ZT_DEPTH >> 1", c.defines)
    assert c_int("(ZT_DEPTH + 0x10ull) / 3 - 1u", c.defines) == 5


def test_gpu_api_instances() -> None:
    text = "ZT_GPU_API(cudaFree, ZT_API_CUDA_FREE, ZT_KIND_FREE)\n#define ZT_GPU_API(a, b, c) x\n"
    assert gpu_api_instances(text) == [("cudaFree", "ZT_API_CUDA_FREE", "ZT_KIND_FREE")]


# ---- bpf/ against event_layout and the decoders -----------------------------------------

# The texts each file is compiled with, as the loaders put them together: socket.c
# #includes the header, the Python walker's text goes in front of profile.c and gpu_calls.c.
PROGRAMS = {
    "zerotrace_events.h": ("zerotrace_events.h",),
    "python_stack.h": ("python_stack.h",),
    "socket.c": ("zerotrace_events.h", "socket.c"),
    "profile.c": ("python_stack.h", "profile.c"),
    "gpu_calls.c": ("python_stack.h", "gpu_calls.c"),
}


@functools.cache
def bpf_text(name: str) -> str:
    return (BPF / name).read_text()


@functools.cache
def program(name: str) -> CText:
    return parse_c("\n".join(bpf_text(part) for part in PROGRAMS[name]))


# event_layout name: (where the C side declares it, its C name)
SCALARS = {
    "ZT_EVENT_FILE_OPEN": ("zerotrace_events.h", "ZT_EVENT_FILE_OPEN"),
    "ZT_EVENT_SOCK_DATA": ("zerotrace_events.h", "ZT_EVENT_SOCK_DATA"),
    "ZT_EVENT_SOCK_CONN": ("zerotrace_events.h", "ZT_EVENT_SOCK_CONN"),
    "ZT_EVENT_FILE_RW": ("zerotrace_events.h", "ZT_EVENT_FILE_RW"),
    "ZT_EVENT_ON_CPU": ("profile.c", "ZT_EVENT_ON_CPU"),
    "ZT_EVENT_OFF_CPU": ("profile.c", "ZT_EVENT_OFF_CPU"),
    "ZT_EVENT_PROCESS_NEWS": ("profile.c", "ZT_EVENT_PROCESS_NEWS"),
    "ZT_EVENT_GPU_CALL": ("gpu_calls.c", "ZT_EVENT_GPU_CALL"),
    "ZT_EVENT_GPU_LIB": ("gpu_calls.c", "ZT_EVENT_GPU_LIB"),
    "COMM_LEN": ("zerotrace_events.h", "ZT_COMM_LEN"),
    "PATH_MAX": ("zerotrace_events.h", "ZT_PATH_MAX"),
    "DEFAULT_PAYLOAD_MAX": ("socket.c", "ZT_PAYLOAD_MAX"),
    "DEFAULT_STACK_DEPTH": ("profile.c", "ZT_STACK_DEPTH"),
    "DEFAULT_PY_DEPTH": ("python_stack.h", "ZT_PY_MAX_DEPTH"),
}
# Python-only facts: perf-buffer padding is the kernel's, not a record's.
PYTHON_ONLY = {"MAX_TRAILING"}
# An IntEnum of event_layout: its C members are the #defines with this prefix in the header.
DEFINE_GROUPS: dict[type[IntEnum], str] = {
    Direction: "ZT_DIR_",
    Source: "ZT_SRC_",
    SockOp: "ZT_OP_",
    ConnKind: "ZT_CONN_",
}


def c_group(constants: Mapping[str, int], prefix: str) -> dict[str, int]:
    return {k.removeprefix(prefix): v for k, v in constants.items() if k.startswith(prefix)}


@pytest.mark.parametrize("name", sorted(SCALARS))
def test_scalar_matches_its_c_declaration(name: str) -> None:
    where, c_name = SCALARS[name]
    assert getattr(layout, name) == program(where).constants[c_name], f"{c_name} in {where}"


@pytest.mark.parametrize("name", sorted({c for _, c in SCALARS.values()}))
def test_every_bpf_file_that_defines_a_layout_name_agrees(name: str) -> None:
    values = {
        path.name: parse_c(path.read_text()).constants.get(name)
        for path in sorted(BPF.glob("*.[ch]"))
    }
    assert len({v for v in values.values() if v is not None}) == 1, values


def test_every_type_tag_in_bpf_is_mirrored() -> None:
    for name in PROGRAMS:
        for tag, value in c_group(program(name).constants, "ZT_EVENT_").items():
            assert getattr(layout, f"ZT_EVENT_{tag}", None) == value, f"ZT_EVENT_{tag} ({name})"


@pytest.mark.parametrize("enum", list(DEFINE_GROUPS), ids=lambda e: e.__name__)
def test_socket_enum_matches_the_header_defines(enum: type[IntEnum]) -> None:
    header = program("zerotrace_events.h").constants
    assert {m.name: m.value for m in enum} == c_group(header, DEFINE_GROUPS[enum])


def test_news_reasons_match_the_profile_program() -> None:
    constants = program("profile.c").constants
    assert {m.name: m.value for m in layout.NewsReason} == c_group(constants, "ZT_NEWS_")


def test_socket_flags_match_the_header() -> None:
    flags = {n: getattr(layout, n) for n in layout.__all__ if n.startswith("F_")}
    header = program("zerotrace_events.h").constants
    assert flags == {f"F_{k}": v for k, v in c_group(header, "ZT_SOCK_F_").items()}


def test_py_status_matches_enum_zt_py_status() -> None:
    c_enum = program("python_stack.h").enums["zt_py_status"]
    assert {m.name: m.value for m in PyStatus} == c_group(c_enum, "ZT_PY_")


def test_every_layout_constant_is_checked() -> None:
    public = {n: getattr(layout, n) for n in layout.__all__}
    ints = {n for n, v in public.items() if type(v) is int}
    assert ints - {n for n in ints if n.startswith("F_")} == set(SCALARS) | PYTHON_ONLY
    enums = {n for n, v in public.items() if isinstance(v, type) and issubclass(v, IntEnum)}
    assert enums == {e.__name__ for e in DEFINE_GROUPS} | {"PyStatus", "NewsReason"}


# (the file that declares the struct, its tag, the member the Python struct stops before,
# the Python struct)
STRUCTS = [
    ("zerotrace_events.h", "zt_file_open_event", None, EVENT_STRUCT),
    ("zerotrace_events.h", "zt_sock_data_hdr", None, DATA_HEADER),
    ("zerotrace_events.h", "zt_sock_conn_event", None, CONN_EVENT),
    ("gpu_calls.c", "zt_gpu_call_event", "py", CALL_STRUCT),
    ("gpu_calls.c", "zt_gpu_lib_event", None, LIB_STRUCT),
    ("profile.c", "zt_profile_event", "kstack", EVENT_HEAD),
    ("profile.c", "zt_process_news", None, NEWS_STRUCT),
    ("python_stack.h", "zt_py_stack", "code", PY_STACK_HEAD),
]


@pytest.mark.parametrize(("where", "tag", "until", "py"), STRUCTS, ids=[s[1] for s in STRUCTS])
def test_decoder_struct_reads_the_c_fields(
    where: str, tag: str, until: str | None, py: struct.Struct
) -> None:
    c = c_fields(program(where), tag, until)
    assert same_fields(c, py_fields(py)), f"{tag}: C {c}, Python {py.format}"


@pytest.mark.parametrize(("where", "tag"), [s[:2] for s in STRUCTS], ids=[s[1] for s in STRUCTS])
def test_record_has_no_implicit_padding(where: str, tag: str) -> None:
    c = program(where)
    assert c_sizeof(c, tag) == sum(f.size for f in c_fields(c, tag))


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_size_pins_in_c_hold_by_this_model(name: str) -> None:
    c = program(name)
    for tag, size in c.pinned.items():
        assert c_sizeof(c, tag) == c_int(size, c.defines), tag


@pytest.mark.parametrize("depth", [1, DEFAULT_PY_DEPTH, 128])
def test_gpu_call_size_follows_the_python_depth(depth: int) -> None:
    c = program("gpu_calls.c")
    assert py_stack_size(depth) == c_sizeof(c, "zt_py_stack", ZT_PY_MAX_DEPTH=depth)
    assert call_size(depth) == c_sizeof(c, "zt_gpu_call_event", ZT_PY_MAX_DEPTH=depth)


@pytest.mark.parametrize(
    ("stack", "py"), [(1, 1), (DEFAULT_STACK_DEPTH, DEFAULT_PY_DEPTH), (64, 7)]
)
def test_profile_size_follows_both_depths(stack: int, py: int) -> None:
    c_size = c_sizeof(
        program("profile.c"), "zt_profile_event", ZT_STACK_DEPTH=stack, ZT_PY_MAX_DEPTH=py
    )
    assert ProfileLayout(stack, py).size == c_size


def test_gpu_api_table_matches_the_probe() -> None:
    c = program("gpu_calls.c")
    want = [
        (symbol, c.defines[api], ApiKind[kind.removeprefix("ZT_KIND_")])
        for symbol, api, kind in gpu_api_instances(bpf_text("gpu_calls.c"))
    ]
    assert [(a.symbol, a.id, a.kind) for a in GPU_APIS] == want
