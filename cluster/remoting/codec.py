"""The remoting frame and command codec: bytes in, commands out. No sockets, no event loop.

Frame (big-endian)::

    | total length i32 (bytes after this field) | serialize type u8 | header length u24 |
    | header (JSON text or ROCKETMQ binary) | body |

ROCKETMQ binary header::

    | code i16 | language u8 | version i16 | opaque i32 | flag i32 |
    | remark length i32 | remark | extFields length i32 | (key len i16, key, value len i32, value)* |

JSON header: the fastjson bean ``{"code","extFields","flag","language","opaque","remark",
"serializeTypeCurrentRPC","version"}``. Peers send extFields values as strings, numbers or
booleans; we accept all three and always write strings (the Go and C++ clients need them).

The header functions below are the reference. When the compiled core is built
(common/speedups.py) the frame functions call its twins instead, which return the same values
and hand back to the reference (by returning None) whatever they do not reproduce exactly.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import IntEnum
from types import ModuleType
from typing import Final, NamedTuple

from cluster.remoting.codes import CURRENT_VERSION, LanguageCode
from cluster.remoting.errors import LocalProtocolError, RemoteProtocolError
from common import speedups

LENGTH: Final = struct.Struct(">i")  # frame length, not counting these 4 bytes
HEADER_MARK: Final = struct.Struct(">i")  # serialize type in the high byte, header length below
FRAME_MAX: Final = 16 * 1024 * 1024  # NettyDecoder's default (com.rocketmq.remoting.frameMaxLength)
HEADER_MAX: Final = 0xFFFFFF
RESPONSE_FLAG: Final = 0b01
ONEWAY_FLAG: Final = 0b10

_BINARY_FIXED = struct.Struct(">hBhii")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")


class SerializeType(IntEnum):
    JSON = 0
    ROCKETMQ = 1


# Per frame, an enum member's lookup costs more than the comparison it is for.
_JSON, _ROCKETMQ = SerializeType.JSON, SerializeType.ROCKETMQ
_FRAME_PREFIX = struct.Struct(">ii")  # LENGTH and HEADER_MARK at once


@dataclass(slots=True)
class RemotingCommand:
    """One request or response. ``opaque`` is set by the connection that sends it.

    Treated as immutable (``dataclasses.replace`` makes a changed copy), but not frozen: a
    frozen dataclass sets each field through ``object.__setattr__``, ~0.9 µs more a command,
    and a client makes one for every answer it reads."""

    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    language: str = "JAVA"
    version: int = CURRENT_VERSION
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)

    def field(self, name: str, default: str | None = None) -> str | None:
        """One extFields value."""
        return self.ext_fields.get(name, default)

    def make_response(
        self, code: int, remark: str | None = None, ext_fields: Mapping[str, object] | None = None,
        body: bytes = b"",
    ) -> RemotingCommand:
        """The response to this request: same opaque and serialize type, response flag set."""
        return RemotingCommand(
            code=code, opaque=self.opaque, flag=RESPONSE_FLAG, remark=remark,
            ext_fields=stringify(ext_fields or {}), body=body,
            serialize_type=self.serialize_type,
        )


def request(code: int, ext_fields: Mapping[str, object] | None = None, body: bytes = b"",
            *, oneway: bool = False, **kwargs) -> RemotingCommand:
    """A new request; values of ``ext_fields`` are turned into strings as Java would."""
    return RemotingCommand(code=int(code), flag=ONEWAY_FLAG if oneway else 0,
                           ext_fields=stringify(ext_fields or {}), body=body, **kwargs)


def stringify(values: Mapping[str, object]) -> dict[str, str]:
    """extFields as strings: booleans as true/false, None dropped (Java's String.valueOf)."""
    out: dict[str, str] = {}
    for key, value in values.items():
        if type(value) is str:  # most values, on every request and answer
            out[key] = value
        elif type(value) is bool:
            out[key] = "true" if value else "false"
        elif value is not None:
            out[key] = str(value)
    return out


# --- encoding ----------------------------------------------------------------------------
def encode(command: RemotingCommand) -> bytes:
    """The whole frame for ``command`` in its serialize type."""
    head, body = encode_parts(command)
    return head + body if body else head


def encode_parts(command: RemotingCommand) -> tuple[bytes, bytes]:
    """The frame for ``command`` as its length, mark and header, then its body: a writer that
    writes the two as they are (one ``writev``) never copies a big body (a pull's ~1 MiB of
    records) to join them."""
    serialize_type = command.serialize_type
    if serialize_type is _ROCKETMQ:
        header = _encode_binary(command)
    else:
        header = _encode_json(command)
    if len(header) > HEADER_MAX:
        raise LocalProtocolError(f"header of {len(header)} bytes exceeds the 16 MiB limit")
    total = 4 + len(header) + len(command.body)
    if total > FRAME_MAX:
        raise LocalProtocolError(f"frame of {total} bytes exceeds the {FRAME_MAX}-byte limit")
    mark = (int(serialize_type) << 24) | len(header)
    return _FRAME_PREFIX.pack(total, mark) + header, command.body


def _encode_json_header(command: RemotingCommand) -> bytes:
    # Keys in fastjson's (alphabetical) order; nulls and empty extFields omitted as Java does.
    header: dict[str, object] = {"code": command.code}
    if command.ext_fields:
        header["extFields"] = dict(command.ext_fields)
    header["flag"] = command.flag
    header["language"] = command.language
    header["opaque"] = command.opaque
    if command.remark is not None:
        header["remark"] = command.remark
    header["serializeTypeCurrentRPC"] = "JSON"
    header["version"] = command.version
    # "replace": a lone surrogate goes out as '?', as Java's String.getBytes writes it.
    return json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "replace")


def _language_byte(name: str) -> int:
    try:
        return LanguageCode[name].value
    except KeyError:
        return LanguageCode.OTHER.value


def _encode_binary_header(command: RemotingCommand) -> bytes:
    remark = (command.remark or "").encode()
    fields = []
    for key, value in command.ext_fields.items():
        k, v = key.encode(), str(value).encode()
        fields.append(_I16.pack(len(k)) + k + _I32.pack(len(v)) + v)
    ext = b"".join(fields)
    if not -32768 <= command.code <= 32767:
        raise LocalProtocolError(f"code {command.code} does not fit the ROCKETMQ header")
    return b"".join((
        _BINARY_FIXED.pack(command.code, _language_byte(command.language),
                           min(command.version, 32767), command.opaque, command.flag),
        _I32.pack(len(remark)), remark, _I32.pack(len(ext)), ext,
    ))


# --- decoding ----------------------------------------------------------------------------
def check_frame_length(total: int, max_frame: int = FRAME_MAX) -> None:
    """A frame's length (after its 4-byte prefix) must hold its header mark and stay within
    the limit: RemoteProtocolError otherwise."""
    if total < 4 or total > max_frame:
        raise RemoteProtocolError(f"frame length {total} is outside 4..{max_frame}")


def decode_frame(frame: bytes | bytearray | memoryview) -> RemotingCommand:
    """Decode one frame without its 4-byte length prefix."""
    if len(frame) < 4:
        raise RemoteProtocolError("frame shorter than its header mark")
    (mark,) = HEADER_MARK.unpack_from(frame, 0)
    serialize = (mark >> 24) & 0xFF
    header_length = mark & HEADER_MAX
    if header_length > len(frame) - 4:
        raise RemoteProtocolError(
            f"header length {header_length} exceeds the frame's {len(frame) - 4} bytes")
    header = bytes(frame[4 : 4 + header_length])
    body = bytes(frame[4 + header_length :])
    if serialize == _JSON:
        return _decode_json(header, body)
    if serialize == _ROCKETMQ:
        return _decode_binary(header, body)
    raise RemoteProtocolError(f"unknown serialize type {serialize}")


def _int_field(header: dict, name: str, default: int = 0) -> int:
    value = header.get(name, default)
    if isinstance(value, bool) or value is None:
        raise RemoteProtocolError(f"header field {name} is not a number")
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError) as exc:  # OverflowError: int(1e999)
        raise RemoteProtocolError(f"header field {name} is not a number") from exc
    if not -(2**31) <= number < 2**31:
        raise RemoteProtocolError(f"header field {name} is out of range")
    return number


def _java_text(text: str) -> str:
    """JSON may escape lone UTF-16 surrogates ("\\ud800"), which no UTF-8 encoder takes: Java
    turns them into '?' when it writes the string out, and so do we, once, here, so that no
    later .encode() (a property string into the CommitLog, a config file) can fail on them."""
    if text.isascii():
        return text
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode()
    return text


def _ext_value(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _java_text(value)
    if isinstance(value, int | float):
        return str(value)
    return _java_text(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


def _decode_json_header(header: bytes, body: bytes) -> RemotingCommand:
    try:
        data = json.loads(header)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise RemoteProtocolError(f"JSON header does not parse: {exc}") from exc
    if not isinstance(data, dict):
        raise RemoteProtocolError("JSON header is not an object")
    ext = data.get("extFields") or {}
    if not isinstance(ext, dict):
        raise RemoteProtocolError("extFields is not an object")
    ext_fields = {}
    for key, value in ext.items():
        text = _ext_value(value)
        if text is not None:
            ext_fields[_java_text(str(key))] = text
    language = data.get("language", "JAVA")
    if isinstance(language, int) and not isinstance(language, bool):
        try:
            language = LanguageCode(language).name
        except ValueError:
            language = "OTHER"
    remark = data.get("remark")
    if isinstance(language, str):
        language = _java_text(language)
    return RemotingCommand(
        code=_int_field(data, "code"),
        opaque=_int_field(data, "opaque"),
        flag=_int_field(data, "flag"),
        remark=_java_text(remark) if isinstance(remark, str) else None,
        ext_fields=ext_fields,
        body=body,
        language=language if isinstance(language, str) else "OTHER",
        version=_int_field(data, "version"),
        serialize_type=SerializeType.JSON,
    )


def _decode_binary_header(header: bytes, body: bytes) -> RemotingCommand:
    try:
        code, language, version, opaque, flag = _BINARY_FIXED.unpack_from(header, 0)
        pos = _BINARY_FIXED.size
        (remark_length,) = _I32.unpack_from(header, pos)
        pos += 4
        if remark_length < 0 or pos + remark_length > len(header):
            raise RemoteProtocolError("remark length runs past the header")
        remark = header[pos : pos + remark_length].decode() if remark_length else None
        pos += remark_length
        (ext_length,) = _I32.unpack_from(header, pos)
        pos += 4
        end = pos + ext_length
        if ext_length < 0 or end > len(header):
            raise RemoteProtocolError("extFields length runs past the header")
        ext_fields = {}
        while pos < end:
            (key_length,) = _I16.unpack_from(header, pos)
            pos += 2
            key = header[pos : pos + key_length].decode()
            pos += key_length
            (value_length,) = _I32.unpack_from(header, pos)
            pos += 4
            if key_length < 0 or value_length < 0 or pos + value_length > end:
                raise RemoteProtocolError("an extFields entry runs past the header")
            ext_fields[key] = header[pos : pos + value_length].decode()
            pos += value_length
    except struct.error as exc:
        raise RemoteProtocolError(f"ROCKETMQ header is cut short: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise RemoteProtocolError("ROCKETMQ header text is not UTF-8") from exc
    try:
        language_name = LanguageCode(language).name
    except ValueError:
        language_name = "OTHER"
    return RemotingCommand(code=code, opaque=opaque, flag=flag, remark=remark,
                           ext_fields=ext_fields, body=body, language=language_name,
                           version=version, serialize_type=SerializeType.ROCKETMQ)


# --- the implementation that runs ---------------------------------------------------------
class HeaderCodec(NamedTuple):
    """The four header functions the frame functions call."""

    decode_json: Callable[[bytes, bytes], RemotingCommand]
    decode_binary: Callable[[bytes, bytes], RemotingCommand]
    encode_json: Callable[[RemotingCommand], bytes]
    encode_binary: Callable[[RemotingCommand], bytes]


PURE: Final = HeaderCodec(_decode_json_header, _decode_binary_header, _encode_json_header,
                          _encode_binary_header)

_LANGUAGE_BYTES: Final = {member.name: member.value for member in LanguageCode}


def _compiled(core: ModuleType) -> HeaderCodec:
    """The compiled core's header functions, each falling back to its pure twin on None."""
    decode_json, decode_binary = core.decode_json_header, core.decode_binary_header
    encode_json, encode_binary = core.encode_json_header, core.encode_binary_header
    other = LanguageCode.OTHER.value

    def decode_json_header(header: bytes, body: bytes) -> RemotingCommand:
        fields = decode_json(header)
        if fields is None:  # not the common subset, or not valid: the reference decides
            return _decode_json_header(header, body)
        code, opaque, flag, remark, ext_fields, language, version = fields
        return RemotingCommand(code, opaque, flag, remark, ext_fields, body, language, version,
                               _JSON)

    def decode_binary_header(header: bytes, body: bytes) -> RemotingCommand:
        fields = decode_binary(header)
        if fields is None:  # the reference raises the precise error
            return _decode_binary_header(header, body)
        code, opaque, flag, remark, ext_fields, language, version = fields
        return RemotingCommand(code, opaque, flag, remark, ext_fields, body, language, version,
                               _ROCKETMQ)

    def encode_json_header(command: RemotingCommand) -> bytes:
        header = encode_json(command.code, command.ext_fields, command.flag, command.language,
                             command.opaque, command.remark, command.version)
        return _encode_json_header(command) if header is None else header

    def encode_binary_header(command: RemotingCommand) -> bytes:
        try:
            language = _LANGUAGE_BYTES.get(command.language, other)  # _language_byte
        except TypeError:  # not even hashable: the reference says what is wrong
            return _encode_binary_header(command)
        header = encode_binary(command.code, language, command.version, command.opaque,
                               command.flag, command.remark, command.ext_fields)
        return _encode_binary_header(command) if header is None else header

    return HeaderCodec(decode_json_header, decode_binary_header, encode_json_header,
                       encode_binary_header)


COMPILED: Final = None if speedups.core is None else _compiled(speedups.core)
# Resolved once, here: the frame functions read these module globals (tests swap them).
_decode_json, _decode_binary, _encode_json, _encode_binary = COMPILED or PURE
# The compiled FrameDecoder steps (split and decode in one call), None on the pure path.
_split_frame: Callable | None = None if speedups.core is None else speedups.core.split_frame
_split_run: Callable | None = None if speedups.core is None else speedups.core.split_run


def command_of(frame: tuple) -> RemotingCommand:
    """The command of a frame tuple from :meth:`FrameDecoder.next_frame`."""
    (_, code, opaque, flag, remark, ext_fields, language, version, serialize, body) = frame
    return RemotingCommand(code, opaque, flag, remark, ext_fields, body, language, version,
                           _ROCKETMQ if serialize else _JSON)


def _frame_of(command: RemotingCommand, end: int) -> tuple:
    """The frame tuple of a command the pure decoder made (:meth:`FrameDecoder.next_frame`)."""
    return (end, command.code, command.opaque, command.flag, command.remark, command.ext_fields,
            command.language, command.version, 0 if command.serialize_type is _JSON else 1,
            command.body)


class FrameDecoder:
    """Turn a byte stream into RemotingCommands. Holds at most one partial frame.

    After a RemoteProtocolError the stream is out of sync: the caller must close the connection.
    """

    def __init__(self, max_frame: int = FRAME_MAX) -> None:
        self._buffer = bytearray()
        self._start = 0
        self.max_frame = max_frame
        # The frame a run stopped at (next_run), split but not taken: next_frame's, unless the
        # buffer moves first.
        self._held: tuple | None = None

    def feed(self, data: bytes) -> None:
        """Add received bytes."""
        self._held = None  # (its end may move with the buffer: it is split again)
        if self._start and self._start >= len(self._buffer) // 2:
            del self._buffer[: self._start]  # compact now and then, not on every frame
            self._start = 0
        self._buffer += data

    def lone_frame(self, data: bytes, requests: bool = True) -> tuple | None:
        """The frame ``data`` is, as :meth:`next_frame` gives it and taken, when nothing is
        buffered and ``data`` is that one whole frame (a client's every answer, a lone
        sender's every request, read by itself), a request only when ``requests``; otherwise
        None, with ``data`` fed. The compiled split reads ``data`` where it lies: no copy into
        the buffer and out again. (On the pure path: always fed.)"""
        split = _split_frame
        if split is not None and not self._buffer:
            found = split(data, 0, self.max_frame)
            if found:  # (None: not whole; False: what the pure decoder decides)
                if found[0] == len(data) and (requests or found[3] & RESPONSE_FLAG):
                    return found
                # More frames, or a request not taken now: fed, the first one held for
                # next_frame as split (the buffer starts where ``data`` does), not again.
                self.feed(data)
                self._held = found
                return None
        self.feed(data)
        return None

    @property
    def pending(self) -> int:
        """Bytes received but not yet part of a whole frame."""
        return len(self._buffer) - self._start

    def next_frame(self) -> tuple | None:
        """The next whole frame as a tuple (end, code, opaque, flag, remark, extFields,
        language, version, serialize type 0 JSON / 1 ROCKETMQ, body), None until more bytes
        arrive. The compiled core splits straight into it; a tuple spares the requests a lane
        answers (connection.py) the command object, and :func:`command_of` makes one."""
        buffer = self._buffer
        start = self._start
        held = self._held
        if held is not None:
            self._held = None
            self._take_to(held[0])
            return held
        split = _split_frame
        if split is not None:
            found = split(buffer, start, self.max_frame)
            if found is None:
                return None
            if found is not False:
                end = found[0]  # (what _take_to does, inline: a frame's hot path)
                self._start = end
                if end == len(buffer):
                    buffer.clear()
                    self._start = 0
                return found
        found = self._command_at(start)
        if found is None:
            return None
        command, end = found
        self._take_to(end)
        return _frame_of(command, end)

    def next_run(self, code: int, limit: int) -> tuple[list[tuple], list[int]]:
        """The whole frames that come next while they are requests of ``code``, at most
        ``limit``, as :meth:`next_frame` gives them, and the bytes each took: the rest of a run
        for a lane (connection.py), split in one call. It stops, taking nothing of it, at the
        first frame that is not whole, is of another code or a response, or does not decode
        (:meth:`next_frame` then raises its error); the frame it stopped at, when split, is
        held for :meth:`next_frame`. Where a run ends may differ between the compiled split
        and the pure one (the compiled one stops at a frame it leaves to the pure decoder),
        never the frames or their order."""
        buffer = self._buffer
        start = self._start
        if self._held is not None:  # (what comes next ends any run)
            return [], []
        split = _split_run
        if split is not None:
            frames, self._held = split(buffer, start, self.max_frame, code, limit)
        else:
            frames = []
            end = start
            while len(frames) < limit:
                try:
                    found = self._command_at(end)
                except RemoteProtocolError:
                    break  # (raised again when the frame is split by itself)
                if found is None:
                    break
                command, after = found
                if command.code != code or command.flag & RESPONSE_FLAG:
                    self._held = _frame_of(command, after)
                    break
                frames.append(_frame_of(command, after))
                end = after
        if not frames:
            return frames, []
        sizes = []
        for frame in frames:
            sizes.append(frame[0] - start)
            start = frame[0]
        self._take_to(start)
        return frames, sizes

    def next_command(self) -> RemotingCommand | None:
        """The next whole command, or None until more bytes arrive."""
        if self._held is not None:  # (split already, by a run that stopped at it)
            return command_of(self.next_frame())  # type: ignore[arg-type]
        buffer = self._buffer
        start = self._start
        split = _split_frame
        if split is not None:  # the compiled core: split and decode on the buffer, one copy
            found = split(buffer, start, self.max_frame)
            if found is None:
                return None
            if found is not False:  # False: what it does not decode, the code below decides
                (end, code, opaque, flag, remark, ext_fields, language, version, serialize,
                 body) = found
                self._start = end
                if end == len(buffer):
                    buffer.clear()
                    self._start = 0
                return RemotingCommand(code, opaque, flag, remark, ext_fields, body, language,
                                       version, _ROCKETMQ if serialize else _JSON)
        found = self._command_at(start)
        if found is None:
            return None
        command, end = found
        self._take_to(end)
        return command

    def _take_to(self, end: int) -> None:
        """The bytes up to ``end`` are taken; an emptied buffer starts afresh (no compaction)."""
        if end == len(self._buffer):
            self._buffer.clear()
            self._start = 0
        else:
            self._start = end

    def _command_at(self, start: int) -> tuple[RemotingCommand, int] | None:
        """The command of the frame at ``start`` and where it ends, taking nothing; None while
        it is not whole."""
        buffer = self._buffer
        if len(buffer) - start < 4:
            return None
        (total,) = LENGTH.unpack_from(buffer, start)
        check_frame_length(total, self.max_frame)
        end = start + 4 + total
        if len(buffer) < end:
            return None
        with memoryview(buffer) as view:
            frame = bytes(view[start + 4 : end])
        return decode_frame(frame), end


__all__ = [
    "COMPILED", "FRAME_MAX", "ONEWAY_FLAG", "PURE", "RESPONSE_FLAG", "FrameDecoder", "HeaderCodec",
    "RemotingCommand", "SerializeType", "check_frame_length", "command_of", "decode_frame",
    "encode", "encode_parts", "replace", "request", "stringify",
]
