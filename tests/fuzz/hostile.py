"""The hostile request generator: well-formed remoting frames with hostile contents.

One ``HostileGenerator`` (seeded ``random.Random``) serves the in-suite state machine and the
long campaign (scripts/fuzz_cluster.py) alike, so a seed printed by either replays the same
bytes. A request is built in three steps:

1. a code (catalogue.py: every code the broker and the name server serve, codes RocketMQ has
   that we do not serve, and codes nobody has);
2. header fields from the code's catalogue entry, most of them valid so the request gets deep
   into the processor, one to three of them hostile (wrong types, floats, booleans and JSON
   objects where numbers go, int32/int64 edges and beyond, huge numbers, odd, long, system and
   path-like strings, lone surrogates, broken properties strings), sometimes missing or joined
   by unknown fields, and a body of the code's kind (values.py);
3. the frame around it, JSON or ROCKETMQ binary serialization, sometimes with hostile frame
   fields: oneway or response flags on a request, odd opaque, version and language.

Frames are encoded here rather than by the project's codec (which must not be able to say
"no"): any JSON value can sit in the JSON header, and ``code``/``flag``/``opaque`` can be out of
the binary header's range (then the JSON form is used).

HA payloads (8-byte big-endian offset reports: valid, zero, negative, huge, ahead of the
master, going backwards, misaligned, cut short, garbage, a remoting frame) come from
:meth:`HostileGenerator.ha_payload`.
"""

from __future__ import annotations

import json
import random
import struct
import time
from dataclasses import dataclass, field

from cluster.remoting.codes import LanguageCode, RequestCode
from tests.fuzz import catalogue as cat
from tests.fuzz import values as val

RESPONSE_FLAG = 0b01
ONEWAY_FLAG = 0b10
FRAME_MAX = 16 * 1024 * 1024
_I16 = (-(2**15), 2**15 - 1)
_I32 = (-(2**31), 2**31 - 1)


@dataclass(slots=True)
class Hostile:
    """One hostile request, ready to write."""

    target: str  # "broker" or "namesrv"
    code: int
    frame: bytes
    opaque: int
    answers: bool  # neither the response nor the oneway flag: the server should answer it
    kinds: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # field=value of what is hostile

    @property
    def name(self) -> str:
        target = cat.NAMESRV_TARGET if self.target == cat.NAMESRV_TARGET else cat.BROKER_TARGET
        return cat.spec_for(target, self.code).name

    def describe(self, limit: int = 300) -> str:
        text = f"{self.target} {self.name}({self.code}) " + "; ".join(self.notes)
        return text if len(text) <= limit else text[:limit] + "…"


@dataclass(slots=True)
class HAPayload:
    """Bytes for the HA port, written chunk by chunk."""

    chunks: list[bytes]
    kind: str
    note: str


def _text(value: object) -> str:
    """A JSON value as the text a ROCKETMQ binary header carries."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value)


def encode_json_frame(code: object, opaque: object, flag: object, ext: dict, body: bytes,
                      version: object = 407, language: object = "JAVA", remark: object = None,
                      extra: dict | None = None) -> bytes:
    header: dict[str, object] = {"code": code}
    if ext:
        header["extFields"] = ext
    header.update({"flag": flag, "language": language, "opaque": opaque})
    if remark is not None:
        header["remark"] = remark
    header.update({"serializeTypeCurrentRPC": "JSON", "version": version})
    header.update(extra or {})
    data = json.dumps(header, ensure_ascii=True, allow_nan=True, separators=(",", ":")).encode()
    return struct.pack(">ii", 4 + len(data) + len(body), len(data)) + data + body


def encode_binary_frame(code: int, opaque: int, flag: int, ext: dict, body: bytes, version: int = 407,
                        language: int = 0, remark: str | None = None) -> bytes:
    parts = []
    for key, value in ext.items():
        k = str(key).encode("utf-8", "surrogatepass")
        v = _text(value).encode("utf-8", "surrogatepass")
        parts.append(struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v)
    fields = b"".join(parts)
    remark_bytes = (remark or "").encode("utf-8", "surrogatepass")
    header = (struct.pack(">hBhii", code, language, version, opaque, flag)
              + struct.pack(">i", len(remark_bytes)) + remark_bytes + struct.pack(">i", len(fields)) + fields)
    return struct.pack(">ii", 4 + len(header) + len(body), (1 << 24) | len(header)) + header + body


def _fits(value: object, bounds: tuple[int, int]) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and bounds[0] <= value <= bounds[1]


class HostileGenerator:
    """Seeded hostile requests. ``known`` is what earlier answers taught (record offsets)."""

    def __init__(self, rng: random.Random, known: val.Known | None = None, big_bodies: bool = True,
                 binary_share: float = 0.3, clock=time.time) -> None:
        self.rng = rng
        self.clock = clock  # timestamps in valid fields; a fixed clock makes the bytes repeatable
        self.known = known or val.Known()
        self.big_bodies = big_bodies
        self.binary_share = binary_share
        self._opaque = rng.randrange(1, 1 << 20)

    # -- codes --------------------------------------------------------------------------------------
    def pick_code(self, target: str) -> int:
        rng = self.rng
        roll = rng.random()
        if roll < 0.05:
            return rng.choice(cat.UNKNOWN_CODES)
        codes = cat.BROKER_CODES if target == cat.BROKER_TARGET else cat.NAMESRV_CODES
        if roll < 0.12:
            return rng.choice(codes)  # served or not
        return rng.choice(cat.served_codes(target))

    # -- requests -----------------------------------------------------------------------------------
    def request(self, target: str, code: int | None = None, binary: bool | None = None) -> Hostile:
        rng = self.rng
        code = self.pick_code(target) if code is None else int(code)
        spec = cat.spec_for(target, code)
        self.known.now_ms = int(self.clock() * 1000)
        binary = rng.random() < self.binary_share if binary is None else binary
        kinds: list[str] = []
        notes: list[str] = []
        ext: dict[str, object] = {name: val.valid_value(rng, kind, self.known) for name, kind in spec.fields}
        self._hostile_fields(spec, ext, not binary, kinds, notes)
        body, body_kind = val.body_for(rng, spec.body, self.big_bodies, self.known.now_ms)
        if body_kind and body_kind not in ("body-small", "body-json-valid"):
            kinds.append(body_kind)
            notes.append(f"body={body[:40]!r}…({len(body)} bytes)")
        self._opaque += 1
        opaque, flag, language, remark, extra = self._opaque, 0, "JAVA", None, None
        version = rng.choice((401, 407, 413))
        if rng.random() < 0.15:
            opaque, flag, version, language, remark, extra = self._hostile_frame(kinds, notes, binary)
        if binary and not (_fits(code, _I16) and _fits(opaque, _I32) and _fits(flag, _I32)
                           and _fits(version, _I16)):
            binary = False  # the binary header cannot carry these: send them as JSON
        if binary:
            lang = LanguageCode[language].value if isinstance(language, str) and language in \
                LanguageCode.__members__ else (language if _fits(language, (0, 255)) else 7)
            frame = encode_binary_frame(code, opaque, flag, ext, body, version, lang,
                                        remark if isinstance(remark, str) else None)
        else:
            frame = encode_json_frame(code, opaque, flag, ext, body, version, language, remark, extra)
        if len(frame) > FRAME_MAX + 4:  # keep it a frame the server reads, not a length error
            body = body[: max(0, len(body) - (len(frame) - FRAME_MAX - 4))]
            frame = (encode_binary_frame(code, opaque, flag, ext, body, version) if binary else
                     encode_json_frame(code, opaque, flag, ext, body, version, language, remark, extra))
        kinds.append("binary" if binary else "json")
        if not kinds[:-1]:
            kinds.insert(0, "valid" if spec.served else "unserved-code")
        answers = not flag & (RESPONSE_FLAG | ONEWAY_FLAG)  # a response or a oneway gets nothing back
        return Hostile(target, code, frame, opaque if isinstance(opaque, int) else 0, answers, kinds, notes)

    def _hostile_fields(self, spec: cat.CodeSpec, ext: dict, json_header: bool, kinds: list[str],
                        notes: list[str]) -> None:
        rng = self.rng
        names = [name for name, _ in spec.fields]
        kind_of = dict(spec.fields)
        roll = rng.random()
        if names and roll < 0.75:
            for name in rng.sample(names, min(len(names), rng.choice((1, 1, 1, 2, 3)))):
                value, kind = val.hostile_value(rng, kind_of[name], json_header)
                ext[name] = value
                kinds.append(kind)
                notes.append(f"{name}={_short(value)}")
        elif names and roll < 0.85:
            for name in rng.sample(names, rng.randint(1, len(names))):
                del ext[name]
                notes.append(f"-{name}")
            kinds.append("missing-field")
        elif roll < 0.92:
            count = rng.choice((1, 3, 2000))
            for i in range(count):
                ext[rng.choice(("", " ", "\x00", "zz", "a" * 300, f"extra{i}"))] = val.hostile_any(rng)
            notes.append(f"+{count} unknown fields")
            kinds.append("extra-field")
        if not json_header:  # text only: what the binary header carries
            for name, value in list(ext.items()):
                if value is None:
                    del ext[name]
                else:
                    ext[name] = _text(value)

    def _hostile_frame(self, kinds: list[str], notes: list[str], binary: bool):
        rng = self.rng
        opaque, flag, version, language, remark, extra = self._opaque, 0, 407, "JAVA", None, None
        pick = rng.randrange(6)
        if pick == 0:
            flag = rng.choice((RESPONSE_FLAG, ONEWAY_FLAG, 3, 4, -1, 2**31 - 1, -(2**31), 0x7FFFFFFD))
            kinds.append("frame-flag")
            notes.append(f"flag={flag}")
        elif pick == 1:
            opaque = rng.choice((-1, 0, 2**31 - 1, -(2**31), self._opaque - 1))
            kinds.append("frame-opaque")
            notes.append(f"opaque={opaque}")
        elif pick == 2:
            version = rng.choice((-1, 0, 120, 121, 32767, -32768, 2**31 - 1))
            kinds.append("frame-version")
            notes.append(f"version={version}")
        elif pick == 3:
            language = rng.choice(("", "COBOL", 99, 255, {"a": 1}, "X" * 1000))
            kinds.append("frame-language")
            notes.append(f"language={_short(language)}")
        elif pick == 4:
            remark = rng.choice(("", "Traceback", "\x00", "a" * 100_000, "\ud800"))
            kinds.append("frame-remark")
            notes.append(f"remark={_short(remark)}")
        elif not binary:
            extra = rng.choice(({"serializeTypeCurrentRPC": "ROCKETMQ"}, {"unknown": [1]},
                                {"extFieldsExtra": {"a": 1}}))
            kinds.append("frame-extra-header")
            notes.append(f"header+={_short(extra)}")
        return opaque, flag, version, language, remark, extra

    def pipeline(self, target: str, count: int) -> list[Hostile]:
        """Several requests to write at once, on one connection."""
        return [self.request(target) for _ in range(count)]

    # -- the HA port -------------------------------------------------------------------------------
    def ha_payload(self, master_offset: int) -> HAPayload:
        rng = self.rng
        report = struct.Struct(">q").pack
        top = max(master_offset, 0)
        pick = rng.randrange(11)
        if pick == 0:
            offset = rng.choice((top, 0))
            return HAPayload([report(offset)], "ha-valid", f"report {offset}")
        if pick == 1:
            offset = rng.choice((-1, -(2**63), -top - 1))
            return HAPayload([report(offset)], "ha-negative", f"report {offset}")
        if pick == 2:
            offset = rng.choice((2**62, 2**63 - 1, top + 1, top + (1 << 30)))
            return HAPayload([report(offset)], "ha-ahead", f"report {offset}")
        if pick == 3:
            first = rng.randint(0, top)
            back = rng.randint(0, first)
            return HAPayload([report(first), report(back), report(rng.choice((0, back // 2, -5)))],
                             "ha-backwards", f"reports {first} then {back}")
        if pick == 4:
            offset = rng.randint(1, max(top, 1)) | 1
            return HAPayload([report(min(offset, top))], "ha-misaligned", f"report {offset}")
        if pick == 5:
            return HAPayload([report(top)[: rng.randint(1, 7)]], "ha-partial", "a cut-short report")
        if pick == 6:
            data = rng.randbytes(rng.randint(1, 100))
            return HAPayload([data], "ha-garbage", data.hex())
        if pick == 7:
            offsets = [rng.randint(0, top) for _ in range(rng.choice((100, 1000)))]
            return HAPayload([b"".join(report(o) for o in offsets)], "ha-many",
                             f"{len(offsets)} reports, the last {offsets[-1]}")
        if pick == 8:
            frame = self.request(cat.BROKER_TARGET, RequestCode.GET_BROKER_RUNTIME_INFO).frame
            return HAPayload([frame], "ha-remoting-frame", "a remoting request on the HA port")
        if pick == 9:
            data = report(top)
            return HAPayload([data[i : i + 1] for i in range(8)], "ha-byte-by-byte",
                             f"report {top} byte by byte")
        data = report(rng.randint(0, top)) + rng.randbytes(rng.randint(1, 7))
        return HAPayload([data], "ha-trailing", data.hex())


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}…({len(text)} chars)"
