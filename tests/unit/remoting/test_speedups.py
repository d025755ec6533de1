"""The compiled core (common/_speedups.c) against the pure reference, value for value and byte
for byte: generated headers, mutated and truncated ones, garbage. Where the reference raises,
the compiled function must return None (the caller then runs the reference, which raises);
elsewhere it returns None or exactly the reference's result, and for the common subset it must
not return None (else the fast path would silently never run).

The comparisons load the extension directly, so they run even under ROCKETDESK_PURE=1; they
are skipped when it is not built, and test_the_compiled_core_is_built_where_a_compiler_exists
fails then if a C compiler is at hand.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tracemalloc
from dataclasses import dataclass
from enum import IntEnum
from types import ModuleType

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cluster.remoting import codec
from cluster.remoting.codec import RemotingCommand, SerializeType
from cluster.remoting.codes import LanguageCode
from cluster.remoting.errors import RemoteProtocolError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _load_extension() -> tuple[ModuleType | None, str]:
    try:
        return importlib.import_module("common._speedups"), ""
    except ImportError as exc:
        return None, str(exc)


# Every test here loads the extension itself or runs a fresh interpreter with the mode it
# names: each does the same whatever this run's mode, so the pure pass leaves them out.
pytestmark = pytest.mark.twins

core, load_error = _load_extension()
needs_core = pytest.mark.skipif(core is None, reason="the compiled core is not built")
RAISES = "raises"  # what the reference did, where it raised


# --- the build itself ------------------------------------------------------------------------
def test_the_compiled_core_is_built_where_a_compiler_exists():
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler here: the pure path is the expected install")
    assert core is not None, (
        f"common._speedups does not import ({load_error}) although a C compiler exists: "
        "the build is broken (`pip install -e .` builds it; see setup.py)")


@pytest.mark.parametrize("value", ["1", "true", "YES", " yes "])
def test_rocketdesk_pure_selects_the_pure_path_everywhere(value):
    program = (
        "from common import speedups\n"
        "from cluster.remoting import codec\n"
        "from storage import message\n"
        "print(speedups.core is None, codec._decode_json is codec.PURE.decode_json,\n"
        "      codec._encode_binary is codec.PURE.encode_binary,\n"
        "      message.java_hash_unsigned is message.java_hash_unsigned_pure)\n"
        "print(speedups.describe())\n"
    )
    env = {**os.environ, "ROCKETDESK_PURE": value}
    done = subprocess.run([sys.executable, "-c", program], env=env, cwd=ROOT, capture_output=True,
                          text=True, check=True, timeout=60)
    flags, description = done.stdout.splitlines()
    assert flags == "True True True True"
    assert description == "pure Python (ROCKETDESK_PURE=1)"


@needs_core
def test_without_the_variable_the_compiled_core_is_selected():
    env = {key: value for key, value in os.environ.items() if key != "ROCKETDESK_PURE"}
    program = ("from common import speedups\nfrom cluster.remoting import codec\n"
               "print(speedups.core is not None, codec._decode_json is codec.COMPILED.decode_json,"
               " speedups.describe())")
    done = subprocess.run([sys.executable, "-c", program], env=env, cwd=ROOT, capture_output=True,
                          text=True, check=True, timeout=60)
    assert done.stdout.strip() in {"True True compiled core (body CRC: pclmul)",
                                   "True True compiled core (body CRC: table)"}


# --- helpers -----------------------------------------------------------------------------------
def _fields(command: RemotingCommand) -> tuple:
    return (command.code, command.opaque, command.flag, command.remark, command.ext_fields,
            command.language, command.version)


def _exact(fields: tuple) -> tuple:
    """The fields with their exact types and the extFields' order (== on dicts ignores it)."""
    code, opaque, flag, remark, ext, language, version = fields
    assert type(ext) is dict
    return (tuple((type(v), v) for v in (code, opaque, flag, remark, language, version)),
            [(type(k), k, type(v), v) for k, v in ext.items()])


def check_json(header: bytes, *, handled: bool = False) -> None:
    try:
        expected = _fields(codec._decode_json_header(header, b""))
    except RemoteProtocolError:
        expected = None
    got = core.decode_json_header(header)
    if expected is None:
        assert got is None, f"the reference raises on {header!r}, the compiled core returned {got}"
        return
    if handled:
        assert got is not None, f"the compiled core left {header!r} to the reference"
    if got is not None:
        assert _exact(got) == _exact(expected)


def check_binary(header: bytes, *, handled: bool = False) -> None:
    try:
        expected = _fields(codec._decode_binary_header(header, b""))
    except RemoteProtocolError:
        expected = None
    got = core.decode_binary_header(header)
    if expected is None:
        assert got is None
        return
    if handled:
        assert got is not None
    if got is not None:
        assert _exact(got) == _exact(expected)


# --- strategies --------------------------------------------------------------------------------
_chars = st.one_of(
    st.characters(),  # anything but surrogates
    st.characters(max_codepoint=0x7F),
    st.characters(min_codepoint=0x10000),  # astral: a surrogate pair in JSON's escapes
    st.sampled_from('\x00\x01\x02\x1f\x7f"\\/\b\f\n\r\t\u2028\ufeff?'),
    st.integers(0xD800, 0xDFFF).map(chr),  # lone surrogates
)
texts = st.text(_chars, max_size=12)
INT32_EDGES = [0, 1, -1, 2**31 - 1, -(2**31), 2**31, -(2**31) - 1, 32767, -32768, 32768, 65535]
int32s = st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from(INT32_EDGES[:5]))
ext_ints = st.one_of(st.integers(-(10**18) + 1, 10**18 - 1), st.sampled_from([0, -1, 10**17]))
scalars = st.one_of(texts, ext_ints, st.booleans(), st.none())


@dataclass
class Obj:
    """A JSON object as a list of pairs: duplicates and any order can be written."""

    pairs: list


def dump(value, ensure_ascii: bool, space: str) -> str:
    if isinstance(value, Obj):
        inner = ("," + space).join(
            f"{dump(k, ensure_ascii, space)}{space}:{space}{dump(v, ensure_ascii, space)}"
            for k, v in value.pairs)
        return "{" + space + inner + space + "}"
    return json.dumps(value, ensure_ascii=ensure_ascii)


@st.composite
def json_headers(draw) -> tuple[bytes, bool]:
    """A header in the subset the compiled core handles, and whether it must handle it."""
    pairs = draw(st.permutations(draw(header_pairs())))
    again = draw(header_pairs())
    if again and draw(st.integers(0, 3)) == 0:  # keys again, with other values: the last win
        chosen = draw(st.lists(st.integers(0, len(again) - 1), unique=True))
        pairs += [again[i] for i in chosen]
    ensure_ascii = draw(st.booleans())
    space = draw(st.sampled_from(["", " ", "\n\t", " \r\n "]))
    text = dump(Obj(pairs), ensure_ascii, space)
    try:
        return text.encode(), True
    except UnicodeEncodeError:  # a raw lone surrogate: json.loads takes it, the core does not
        return text.encode("utf-8", "surrogatepass"), False


@st.composite
def header_pairs(draw) -> list:
    pairs = []
    for name in ("code", "opaque", "flag", "version"):
        if draw(st.integers(0, 9)):
            pairs.append((name, draw(int32s)))
    if draw(st.booleans()):
        pairs.append(("language", draw(st.one_of(
            st.sampled_from([m.name for m in LanguageCode]), texts, st.integers(-3, 20),
            st.booleans(), st.none()))))
    if draw(st.booleans()):
        pairs.append(("remark", draw(st.one_of(texts, st.none(), ext_ints, st.booleans()))))
    if draw(st.booleans()):
        pairs.append(("serializeTypeCurrentRPC", "JSON"))
    ext = draw(st.one_of(
        st.none(),
        st.lists(st.tuples(st.one_of(texts, st.sampled_from(["topic", "a", "?"])), scalars),
                 max_size=8).map(Obj)))
    if ext is not None or draw(st.booleans()):
        pairs.append(("extFields", ext))
    pairs += draw(st.lists(st.tuples(texts, scalars), max_size=3))  # keys the codec ignores
    return pairs


TOKENS = [b'"', b"\\", b"\\u", b"\\ud800", b"\\udc00", b"{", b"}", b"[", b"]", b",", b":", b"null",
          b"true", b"1e5", b".5", b"-", b"0", b"01", b"NaN", b"\xed\xa0\x80", b"\xff", b"\x00",
          b"\xc3", b"\xf0\x9f\x98", b" ", b'"code":', b'"extFields":{', b"9" * 20]


@st.composite
def mutated(draw, base) -> bytes:
    data = bytearray(draw(base))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.integers(0, 4))
        if kind == 0 and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif kind == 1:
            del data[at : at + draw(st.integers(1, 8))]
        elif kind == 2:
            data[at:at] = draw(st.sampled_from(TOKENS))
        elif kind == 3:
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
        else:
            del data[at:]
    return bytes(data)


# --- decode_json_header ------------------------------------------------------------------------
@needs_core
@settings(max_examples=500, deadline=None)
@given(json_headers())
def test_json_headers_decode_exactly_as_the_reference(generated):
    header, handled = generated
    check_json(header, handled=handled)


@needs_core
@settings(max_examples=800, deadline=None)
@given(mutated(json_headers().map(lambda generated: generated[0])))
def test_mutated_json_headers_are_the_references_or_left_to_it(header):
    check_json(header)


@needs_core
@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_json_headers_are_the_references_or_left_to_it(header):
    check_json(header)


@needs_core
@pytest.mark.parametrize(
    ("header", "handled"),
    [
        (b"{}", True),
        (b' \t\r\n{ } \n', True),
        (b'{"code":1,"code":2}', True),
        (b'{"\\u0063ode":5,"l\\u0061nguage":"GO"}', True),  # escaped names are the same keys
        (b'{"extFields":{"a":"1","b":"2","a":null}}', True),  # null after a value: dropped
        (b'{"extFields":{"a":null,"b":"2","a":"1"}}', True),  # ... first place, last value
        (b'{"extFields":{"\\ud800":"x","?":"y","\\udfff":"z"}}', True),  # three keys, one "?"
        (b'{"extFields":{"n":-0,"m":-12,"t":true,"f":false,"e":""}}', True),
        (b'{"extFields":{"a":"1"},"extFields":null}', True),
        (b'{"extFields":{}}', True),
        (b'{"remark":"\\ud83d\\ude00 \\ud83d x \\ude00\\ud83d"}', True),  # a pair, then lone halves
        (b'{"remark":"\\ud800\\ud800\\udc00"}', True),
        (b'{"remark":"\\u00e9\\u0000\\/\\"\\\\\\b\\f\\n\\r\\t"}', True),
        (b'{"language":13,"remark":7}', True),
        (b'{"language":14}', True),
        (b'{"language":-1}', True),
        (b'{"language":null}', True),
        (b'{"language":true}', True),
        (b'{"language":"\\ud800"}', True),
        (b'{"code":2147483647,"opaque":-2147483648}', True),
        (b'{"other":"x","more":[1],"code":1}', False),  # a nested value the pure path skips
        (b'{"code":2147483648}', False),  # out of range: the reference raises
        (b'{"code":1.0}', False),  # int(1.0): the reference's business
        (b'{"version":1e510}', False),  # int(inf): the reference once let OverflowError out
        (b'{"version":-Infinity}', False),
        (b'{"version":NaN}', False),
        (b'{"code":"7"}', False),
        (b'{"code":true}', False),
        (b'{"code":null}', False),
        (b'{"language":1.5}', False),
        (b'{"remark":1e3}', False),
        (b'{"extFields":{"a":1.5}}', False),
        (b'{"extFields":{"a":[1,2]}}', False),
        (b'{"extFields":{"a":{"b":"\\ud800"}}}', False),
        (b'{"extFields":{"a":NaN}}', False),
        (b'{"extFields":{"a":12345678901234567890}}', False),
        (b'{"extFields":{"a":"' + b"9" * 5000 + b'"}}', True),
        (b'{"extFields":{"a":' + b"9" * 5000 + b"}}", False),  # beyond int's digit limit
        (b'{"extFields":[]}', False),
        (b'{"extFields":false}', False),
        (b'{"extFields":"x"}', False),
        (b'{"extFields":"",}', False),
        (b'{"code":1,}', False),
        (b'{"code":01}', False),
        (b'{"code":-}', False),
        (b'{"code":1}x', False),
        (b'{"code":1} {}', False),
        (b"[]", False),
        (b"", False),
        (b'"x"', False),
        (b"\xef\xbb\xbf{}", False),  # a UTF-8 BOM: json.loads reads it as utf-8-sig
        ('{"code":3}'.encode("utf-16-le"), False),
        ('{"code":3}'.encode("utf-16"), False),
        (b'{"remark":"\xed\xa0\x80"}', False),  # an encoded surrogate: surrogatepass in json
        (b'{"remark":"\xc0\x80"}', False),
        (b'{"remark":"\xf4\x90\x80\x80"}', False),
        (b'{"remark":"a\x01b"}', False),  # a raw control character
        (b'{"remark":"\\x"}', False),
        (b'{"remark":"\\u12"}', False),
        (b'{"remark":"\\ud800\\u12"}', False),
        (b'{"remark":"abc', False),
        (b'{"remark":"abc\\', False),
        (b'{"remark":"abc\\"}', False),
        (b'{"a":{"b":' * 5000, False),  # deep nesting: RecursionError in the reference
    ],
)
def test_json_edge_cases(header, handled):
    check_json(header, handled=handled)


@needs_core
def test_json_decode_takes_only_bytes():
    assert core.decode_json_header(bytearray(b"{}")) is None
    assert core.decode_json_header("{}") is None


# --- decode_binary_header ----------------------------------------------------------------------
commands = st.builds(
    RemotingCommand,
    code=st.integers(-32768, 32767),
    opaque=int32s,
    flag=int32s,
    remark=st.one_of(st.none(), st.text(max_size=20)),
    ext_fields=st.dictionaries(st.text(max_size=10), st.text(max_size=20), max_size=6),
    language=st.sampled_from([m.name for m in LanguageCode] + ["NOPE"]),
    version=st.integers(-32768, 40000),
    serialize_type=st.just(SerializeType.ROCKETMQ),
)
binary_headers = commands.map(codec._encode_binary_header)


@needs_core
@settings(max_examples=300, deadline=None)
@given(binary_headers)
def test_binary_headers_decode_exactly_as_the_reference(header):
    check_binary(header, handled=True)


@needs_core
@settings(max_examples=500, deadline=None)
@given(mutated(binary_headers))
def test_mutated_binary_headers_are_the_references_or_left_to_it(header):
    check_binary(header)


@st.composite
def forged_binary_headers(draw) -> bytes:
    """Lengths that lie: negative, past the end, past extFields; bytes that are not UTF-8."""
    raw = st.one_of(st.text(max_size=6).map(str.encode), st.binary(max_size=6))
    length = st.one_of(st.integers(-3, 12), st.sampled_from([-(2**31), 2**31 - 1, 32767, -32768]))
    head = struct.pack(">hBhii", draw(st.integers(-32768, 32767)), draw(st.integers(0, 255)),
                       draw(st.integers(-32768, 32767)), draw(int32s), draw(int32s))
    remark = draw(raw)
    entries = b""
    for _ in range(draw(st.integers(0, 3))):
        key, value = draw(raw), draw(raw)
        key_length = draw(st.one_of(st.just(len(key)), st.integers(-32768, 32767)))
        value_length = draw(st.one_of(st.just(len(value)), length))
        entries += struct.pack(">h", key_length) + key + struct.pack(">i", value_length) + value
    remark_length = draw(st.one_of(st.just(len(remark)), length))
    ext_length = draw(st.one_of(st.just(len(entries)), length))
    tail = draw(st.binary(max_size=4))
    return (head + struct.pack(">i", remark_length) + remark + struct.pack(">i", ext_length)
            + entries + tail)


@needs_core
@settings(max_examples=800, deadline=None)
@given(st.one_of(forged_binary_headers(), st.binary(max_size=60)))
def test_forged_binary_headers_are_the_references_or_left_to_it(header):
    check_binary(header)


# --- encode_json_header ------------------------------------------------------------------------
class Code(IntEnum):
    SEND = 310


numbers = st.one_of(int32s, st.sampled_from(INT32_EDGES), st.integers(-(2**70), 2**70),
                    st.just(Code.SEND))
odd_numbers = st.one_of(numbers, st.booleans(), st.floats(allow_nan=False), st.none())
encode_texts = st.text(_chars, max_size=15)


@st.composite
def json_commands(draw) -> tuple[RemotingCommand, bool]:
    odd = draw(st.integers(0, 5)) == 0
    value = st.one_of(encode_texts, st.integers(), st.booleans(), st.none()) if odd else encode_texts
    number = odd_numbers if odd else numbers
    remark = st.one_of(st.none(), encode_texts, st.integers()) if odd else st.one_of(st.none(), encode_texts)
    command = RemotingCommand(
        code=draw(number), opaque=draw(number), flag=draw(number), version=draw(number),
        remark=draw(remark),
        ext_fields=draw(st.dictionaries(encode_texts, value, max_size=6)),
        language=draw(st.one_of(st.sampled_from(["JAVA", "CPP", "GO"]), encode_texts)),
    )
    return command, not odd


@needs_core
@settings(max_examples=500, deadline=None)
@given(json_commands())
@example((RemotingCommand(105, opaque=7, ext_fields={"topic": "TopicTest"}), True))
@example((RemotingCommand(1, remark="\x00\x1f\x7f\u2028\ud800\U0001f600"), True))
def test_json_headers_encode_byte_for_byte_as_the_reference(generated):
    command, handled = generated
    try:
        expected = codec._encode_json_header(command)
    except (TypeError, ValueError):
        expected = None
    got = core.encode_json_header(command.code, command.ext_fields, command.flag,
                                  command.language, command.opaque, command.remark, command.version)
    if expected is None:
        assert got is None
        return
    if handled:
        assert got is not None
    if got is not None:
        assert type(got) is bytes
        assert got == expected


@needs_core
def test_json_encode_leaves_what_it_does_not_write_itself_to_the_reference():
    encode = core.encode_json_header
    assert encode(1, {"a": 1}, 0, "JAVA", 0, None, 0) is None
    assert encode(1, {1: "a"}, 0, "JAVA", 0, None, 0) is None
    assert encode(True, {}, 0, "JAVA", 0, None, 0) is None
    assert encode(1.0, {}, 0, "JAVA", 0, None, 0) is None
    assert encode(1, {}, 0, "JAVA", 0, 5, 0) is None
    assert encode(1, {}, 0, None, 0, None, 0) is None
    assert encode(1, [], 0, "JAVA", 0, None, 0) is None
    with pytest.raises(TypeError):
        encode(1, {}, 0)


# --- encode_binary_header ----------------------------------------------------------------------
wide = st.one_of(st.integers(), st.sampled_from(INT32_EDGES), st.booleans())


@st.composite
def binary_commands(draw) -> RemotingCommand:
    odd = draw(st.integers(0, 5)) == 0
    value = st.one_of(encode_texts, st.integers(), st.none()) if odd else encode_texts
    return RemotingCommand(
        code=draw(wide), opaque=draw(wide), flag=draw(wide), version=draw(wide),
        remark=draw(st.one_of(st.none(), encode_texts)),
        ext_fields=draw(st.dictionaries(encode_texts, value, max_size=6)),
        language=draw(st.sampled_from([m.name for m in LanguageCode] + ["", "java", "x"])),
        serialize_type=SerializeType.ROCKETMQ,
    )


def check_binary_encode(command: RemotingCommand) -> None:
    try:
        expected = codec._encode_binary_header(command)
    except Exception:  # LocalProtocolError, struct.error, UnicodeEncodeError, AttributeError
        expected = None
    got = core.encode_binary_header(command.code, codec._language_byte(command.language),
                                    command.version, command.opaque, command.flag,
                                    command.remark, command.ext_fields)
    if expected is None:
        assert got is None
        return
    if all(type(value) is str for value in command.ext_fields.values()):
        assert got is not None  # values other than str go through the reference's str()
    if got is not None:
        assert type(got) is bytes
        assert got == expected


@needs_core
@settings(max_examples=500, deadline=None)
@given(binary_commands())
def test_binary_headers_encode_byte_for_byte_as_the_reference(command):
    check_binary_encode(command)


@needs_core
@pytest.mark.parametrize(
    "command",
    [
        RemotingCommand(1, ext_fields={"k" * 32767: "v"}),
        RemotingCommand(1, ext_fields={"k" * 32768: "v"}),  # struct.error in the reference
        RemotingCommand(1, ext_fields={"\u00e9" * 16384: "v"}),  # 32768 bytes as UTF-8
        RemotingCommand(1, remark=""),
        RemotingCommand(1, remark="\ud800"),
        RemotingCommand(1, ext_fields={"a": "\udfff"}),
        RemotingCommand(32768),
        RemotingCommand(-32769),
        RemotingCommand(1, version=10**30),
        RemotingCommand(1, version=-(10**30)),
        RemotingCommand(1, version=-32769),
        RemotingCommand(1, opaque=2**31),
        RemotingCommand(1, flag=-(2**31) - 1),
        RemotingCommand(1, version=1.5),
    ],
    ids=lambda command: repr(command)[:60],
)
def test_binary_encode_edge_cases(command):
    check_binary_encode(command)


# --- nothing kept, nothing leaked ---------------------------------------------------------------
@needs_core
def test_no_memory_or_references_are_kept_across_calls():
    json_inputs = [
        b'{"code":310,"extFields":{"a":"x\\u0001y","b":"2","n":null,"t":true,"i":-0},'
        b'"flag":0,"language":"JAVA","opaque":1,"remark":"\\ud800","version":401}',
        b'{"extFields":{"\\ud800":"x","?":"y","a":null}}',
        b'{"extFields":{"a":"1"},"extFields":{"b":2},"remark":"r","remark":null,"language":"x",'
        b'"language":3}',
        b'{"extFields":{"a":"1","b":[1]}}', b'{"remark":"x","code":1.5}', b'{"language":"\\x"}',
        b'{"extFields":{"a":"' + "é".encode() * 300 + b'\\n"}}', b'{"extFields":{"a":"1"', b"\xff",
    ]
    binary_inputs = [codec._encode_binary_header(RemotingCommand(
        1, remark="r", ext_fields={"a": "b", "c": "d"}, serialize_type=SerializeType.ROCKETMQ))]
    binary_inputs += [binary_inputs[0][:n] for n in range(len(binary_inputs[0]))]
    binary_inputs.append(binary_inputs[0].replace(b"d", b"\xff"))
    true_text = core.decode_json_header(b'{"extFields":{"t":true}}')[4]["t"]
    java = core.decode_json_header(b"{}")[5]

    def run():
        for data in json_inputs:
            core.decode_json_header(data)
        for data in binary_inputs:
            core.decode_binary_header(data)
        core.encode_json_header(1, {"a": "x\n\u00e9", "b": "\ud800"}, 0, "JAVA", 2**80, "r", 1)
        core.encode_json_header(1, {"a": "x", "b": 1}, 0, "JAVA", 0, None, 1)
        core.encode_json_header(2**80, {}, 0, "JAVA", 0, None, 1.5)
        core.encode_binary_header(1, 0, 5, 6, 7, "r\u00e9", {"a": "b", "c": "\u00e9"})
        core.encode_binary_header(1, 0, 5, 6, 7, "r", {"a": "b", "c": 1})
        core.java_hash_unsigned("topic#key\u00e9\U0001f600", seed=-(2**70))
        with pytest.raises(UnicodeEncodeError):
            core.java_hash_unsigned("x\ud800")

    for _ in range(50):
        run()
    gc.collect()
    references = sys.getrefcount(true_text), sys.getrefcount(java)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(2000):
            run()
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024, f"{grown} bytes kept after 2000 rounds"
    assert (sys.getrefcount(true_text), sys.getrefcount(java)) == references
