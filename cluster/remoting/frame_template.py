"""Frames of one command shape written from a template: the hot requests and answers.

A SEND_MESSAGE_V2 request and its SUCCESS answer differ from the previous ones only in the
opaque and a few extFields values (queue id, born time, properties; msgId, queue offset). Making
a RemotingCommand, turning its fields into strings and encoding its header costs the broker and
the client more than everything else about the frame. A template is cut once from a sample
frame that the codec itself encodes, with markers where the varying values go; filling it joins
the pieces with the values and prefixes the lengths. So a filled frame is, byte for byte, the
frame ``encode`` writes for the same command (tests hold the two equal on random values), and
the template stays right whatever the encoder does with key order, escaping or defaults.

JSON headers only: the fixed fields of a ROCKETMQ binary header carry lengths that change with
the values, and nothing hot uses that serialize type here (RocketMQ clients send JSON unless
told otherwise). Callers encode other shapes the usual way.
"""

from __future__ import annotations

import json.encoder
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from cluster.remoting.codec import (
    FRAME_MAX,
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    RemotingCommand,
    SerializeType,
    encode,
)
from cluster.remoting.codes import CURRENT_VERSION
from cluster.remoting.errors import LocalProtocolError
from common import speedups

# A JSON string literal with its quotes, escaped as the codec escapes (C, from the json module).
_quoted = json.encoder.encode_basestring
_OPAQUE_MARK: Final = 1_987_654_321  # a marker value: decimal digits no other field contains
_PREFIX_LENGTH: Final = 8  # frame length i32 + serialize type and header length i32
_FRAME_PREFIX: Final = struct.Struct(">ii")
# The compiled SendAnswerTemplate.frames (None on the pure path: the loop there is its twin).
_send_answers: Callable | None = getattr(speedups.core, "send_answers", None)
# The compiled fill of any template's frame (None on the pure path: _fill and _framed are its
# twin): a request framed in one call, not a %-format, an encode and a join (issue 14).
_fill_frame: Callable | None = getattr(speedups.core, "fill_frame", None)


class FrameTemplate:
    """Frames of ``code`` whose extFields are ``fields``: a value is fixed, or None for one
    given to :meth:`frame` in the order of the mapping. Bodies are appended as they are."""

    __slots__ = ("_fill", "_format", "_order", "_pieces", "_plain", "_plain_bytes", "_variables",
                 "code")

    def __init__(self, code: int, fields: Mapping[str, str | None], *, flag: int = 0,
                 language: str = "JAVA", version: int = CURRENT_VERSION,
                 plain: frozenset[str] = frozenset()) -> None:
        """``plain`` names values that JSON never escapes (digits, hex ids): they are put in
        as given, and may be ints."""
        self.code = code
        self._variables = tuple(name for name, value in fields.items() if value is None)
        self._plain = tuple(name in plain for name in self._variables)
        # Markers must occur once in the sample's header: a fixed value holding one (unlikely,
        # but nothing forbids it) is met with other markers.
        for salt in range(16):
            try:
                self._format, self._order = _cut(code, fields, flag, language, version, salt,
                                                 plain)
                break
            except _MarkerClash:
                continue
        else:
            raise ValueError("no template markers are unique in these fields")
        self._fill = _compile_filler(self._format, self._order, self._plain)
        # What the compiled fill takes: the format's text around its slots, encoded, and
        # which values go in as they are.
        self._pieces = _pieces_of(self._format, len(self._order))
        self._plain_bytes = bytes(self._plain)

    @property
    def variables(self) -> Sequence[str]:
        """The names of the values :meth:`frame` takes, in order."""
        return self._variables

    def frame(self, opaque: int, values: Sequence[str | int], body: bytes = b"") -> bytes:
        """The whole frame (length prefix included) with ``opaque`` and these values."""
        fill = _fill_frame
        if fill is not None and self._pieces is not None:
            framed = fill(self._pieces, self._order, self._plain_bytes, opaque, values, body,
                          FRAME_MAX)
            if framed is not None:  # (None: what only the Python way decides, or words)
                return framed
        return self._framed(self._fill(opaque, values), body)

    def _framed(self, text: str, body: bytes) -> bytes:
        # "replace": a lone surrogate goes out as '?', as the codec (and Java) write it.
        header = text.encode("utf-8", "replace")
        size = len(header)
        if 4 + size + len(body) > FRAME_MAX:
            raise LocalProtocolError(f"frame of {4 + size + len(body)} bytes exceeds the "
                                     f"{FRAME_MAX}-byte limit")
        return b"".join((_FRAME_PREFIX.pack(4 + size + len(body), size), header, body))


class RequestTemplate:
    """A request's two templates, sent with an answer wanted or oneway (the flag differs)."""

    __slots__ = ("_fields", "_oneway", "_plain", "_twoway", "code")

    def __init__(self, code: int, fields: Mapping[str, str | None],
                 plain: frozenset[str] = frozenset()) -> None:
        self.code = code
        self._fields = dict(fields)
        self._plain = plain
        self._twoway = FrameTemplate(code, fields, plain=plain)
        self._oneway: FrameTemplate | None = None  # built if ever used

    def prepare(self, values: Sequence[str | int], body: bytes = b"") -> PreparedRequest:
        """This request with these values and body, framed once its opaque is known."""
        return PreparedRequest(self, values, body)

    def frame(self, opaque: int, values: Sequence[str | int], body: bytes,
              oneway: bool) -> bytes:
        if not oneway:
            return self._twoway.frame(opaque, values, body)
        if self._oneway is None:
            self._oneway = FrameTemplate(self.code, self._fields, flag=ONEWAY_FLAG,
                                         plain=self._plain)
        return self._oneway.frame(opaque, values, body)


class PreparedRequest:
    """A request to be framed from its template when the connection gives it an opaque."""

    __slots__ = ("body", "template", "values")

    def __init__(self, template: RequestTemplate, values: Sequence[str | int],
                 body: bytes) -> None:
        self.template = template
        self.values = values
        self.body = body

    @property
    def code(self) -> int:
        return self.template.code

    def frame(self, opaque: int, oneway: bool = False) -> bytes:
        if oneway:
            return self.template.frame(opaque, self.values, self.body, True)
        template = self.template._twoway
        fill = _fill_frame
        if fill is not None and template._pieces is not None:  # (a send's: inline, a call less)
            framed = fill(template._pieces, template._order, template._plain_bytes, opaque,
                          self.values, self.body, FRAME_MAX)
            if framed is not None:
                return framed
        return template._framed(template._fill(opaque, self.values), self.body)


class SendAnswerTemplate:
    """SEND_MESSAGE(_V2)'s SUCCESS answer, as the send processor writes it: msgId, queueId,
    queueOffset, then the broker's MSG_REGION and TRACE_ON (no transactionId)."""

    __slots__ = ("_direct", "_key", "_pieces", "_template")

    def __init__(self) -> None:
        self._key: tuple[str, str] | None = None
        self._template: FrameTemplate | None = None
        self._direct: str | None = None  # the template's format, if its values come in order
        self._pieces: tuple[bytes, ...] | None = None  # its text around the values, encoded

    def frame(self, opaque: int, region: str, trace_on: str, msg_id: str, queue_id: int,
              queue_offset: int) -> bytes:
        template = self._template_for(region, trace_on)
        direct = self._direct
        fill = _fill_frame
        if direct is None or fill is None or self._pieces is None:
            return template.frame(opaque, (msg_id, queue_id, queue_offset))
        framed = fill(self._pieces, _DIRECT_ORDER, _DIRECT_PLAIN, opaque,
                      (msg_id, queue_id, queue_offset), b"", FRAME_MAX)
        if framed is not None:  # (a lone sender's answer, in one call)
            return framed
        return template._framed(direct % (msg_id, queue_id, queue_offset, opaque), b"")

    def frames(self, region: str, trace_on: str,
               answers: Iterable[tuple[int, str, int, int]]) -> list[bytes]:
        """:meth:`frame` for each (opaque, msgId, queue id, queue offset) of a run of sends
        answered together, in one call."""
        template = self._template_for(region, trace_on)
        direct = self._direct
        if direct is None:
            return [template.frame(opaque, (msg_id, queue_id, queue_offset))
                    for opaque, msg_id, queue_id, queue_offset in answers]
        fill = _send_answers
        pieces = self._pieces
        if fill is not None and pieces is not None and type(answers) is list:
            framed = fill(pieces, answers, FRAME_MAX)
            if framed is not None:  # (None: what only the loop below decides)
                return framed
        pack = _FRAME_PREFIX.pack
        framed = []
        for opaque, msg_id, queue_id, queue_offset in answers:
            header = (direct % (msg_id, queue_id, queue_offset, opaque)).encode("utf-8",
                                                                               "replace")
            size = len(header)
            if 4 + size > FRAME_MAX:  # (a region of megabytes: as ``_framed`` refuses it)
                raise LocalProtocolError(f"frame of {4 + size} bytes exceeds the "
                                         f"{FRAME_MAX}-byte limit")
            framed.append(pack(4 + size, size) + header)
        return framed

    def _template_for(self, region: str, trace_on: str) -> FrameTemplate:
        key = (region, trace_on)
        template = self._template
        if key != self._key or template is None:  # the broker's config changed (or first use)
            template = self._template = FrameTemplate(
                0, {"msgId": None, "queueId": None, "queueOffset": None, "MSG_REGION": region,
                    "TRACE_ON": trace_on}, flag=RESPONSE_FLAG, plain=_SEND_ANSWER_PLAIN)
            # extFields come before "opaque" in the header: then one %-format takes the values
            # as they are (a msgId is hex, the rest are numbers), with no loop to order them.
            self._direct = template._format if template._order == (0, 1, 2, -1) else None
            self._pieces = None if self._direct is None else _pieces_of(self._direct, 4)
            self._key = key
        return template


_SEND_ANSWER_PLAIN: Final = frozenset({"msgId", "queueId", "queueOffset"})
# The direct format's slots, for the compiled fill: the three values as they are, the opaque.
_DIRECT_ORDER: Final = (0, 1, 2, -1)
_DIRECT_PLAIN: Final = b"\x01\x01\x01"


def _pieces_of(direct: str, slots: int) -> tuple[bytes, ...] | None:
    """The text of a template's %-format around its ``slots`` values, each piece encoded as the
    whole header is ("replace": a lone surrogate goes out as '?'), for the compiled fills; None
    if the format is not that many values (%s or %d) in fixed text."""
    pieces: list[str] = []
    current: list[str] = []
    index = 0
    while index < len(direct):
        char = direct[index]
        if char != "%":
            current.append(char)
            index += 1
            continue
        kind = direct[index + 1:index + 2]
        if kind == "%":
            current.append("%")
        elif kind in ("s", "d"):
            pieces.append("".join(current))
            current = []
        else:
            return None
        index += 2
    pieces.append("".join(current))
    if len(pieces) != slots + 1:
        return None
    return tuple(piece.encode("utf-8", "replace") for piece in pieces)


class _MarkerClash(Exception):
    """A marker is not found exactly once in the sample header."""


def _cut(code: int, fields: Mapping[str, str | None], flag: int, language: str, version: int,
         salt: int, plain: frozenset[str]) -> tuple[str, tuple[int, ...]]:
    """Encode a sample with markers for the opaque and the values, and cut its header into one
    %-format: the fixed text with '%' doubled, %d for the opaque and %s for each value (given
    quoted and escaped, or inside the template's quotes for plain ones); the order says which
    value goes where (-1: the opaque)."""
    opaque_mark = _OPAQUE_MARK - salt
    markers: dict[str, str] = {}
    sample: dict[str, str] = {}
    for name, value in fields.items():
        if value is None:  # \x7f: a character JSON escapes in no way
            markers[name] = f"\x7f{salt}.{len(markers)}\x7f"
        sample[name] = markers[name] if value is None else value
    header = encode(RemotingCommand(code, opaque_mark, flag, None, sample, b"", language,
                                    version, SerializeType.JSON))[_PREFIX_LENGTH:]
    text = header.decode()
    cuts = [(_unique(text, str(opaque_mark)), -1, len(str(opaque_mark)))]
    for index, (name, marker) in enumerate(markers.items()):
        if name in plain:  # the quotes stay in the template
            cuts.append((_unique(text, marker), index, len(marker)))
        else:
            quoted = _quoted(marker)
            cuts.append((_unique(text, quoted), index, len(quoted)))
    cuts.sort()
    parts: list[str] = []
    position = 0
    for at, index, length in cuts:
        parts.append(text[position:at].replace("%", "%%"))
        parts.append("%d" if index < 0 else "%s")
        position = at + length
    parts.append(text[position:].replace("%", "%%"))
    return "".join(parts), tuple(index for _, index, _ in cuts)


def _compile_filler(format_: str, order: tuple[int, ...],
                    plain: tuple[bool, ...]) -> Callable[[int, Sequence[str | int]], str]:
    """``fill(opaque, values)``: the header text, written out as one line of Python for this
    template (values unpacked, each quoted or not, in the header's order), the way the header
    decoders are (cluster/remoting/header.py): no loop and no test a frame."""
    names = [f"v{index}" for index in range(len(plain))]
    unpack = f"    {', '.join(names)}{',' if len(names) == 1 else ''} = values\n" if names else ""
    args = ["opaque" if index < 0 else names[index] if plain[index] else f"quoted({names[index]})"
            for index in order]
    source = (f"def fill(opaque, values):\n{unpack}"
              f"    return FORMAT % ({', '.join(args)},)\n")
    env: dict[str, Any] = {"FORMAT": format_, "quoted": _quoted}
    exec(source, env)  # our own template's shape, never input
    return env["fill"]


def _unique(text: str, marker: str) -> int:
    at = text.find(marker)
    if at < 0 or text.find(marker, at + 1) >= 0:
        raise _MarkerClash(marker)
    return at


__all__ = ["FrameTemplate", "PreparedRequest", "RequestTemplate", "SendAnswerTemplate"]
