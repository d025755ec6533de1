"""A compressed REGISTER_BROKER body (header ``compressed=true``) read back into the JSON body's
shape, so the checks of headers.py read both. Bytes in, values out: no I/O.

What a Java broker with ``compressedRegister=true`` sends (RocketMQ's RegisterBrokerBody,
compressed form): one zlib stream (Deflater, zlib header) of, big-endian::

    | i32 n | n bytes: the DataVersion as JSON                                      |
    | i32 topic count | per topic: i32 n, n bytes of TopicConfig's text form        |
    | i32 n | n bytes: the filter server list as a JSON array                       |
    | 5.x only: i32 count | per entry: i32 n, n bytes of TopicQueueMappingInfo JSON |

A topic's text form is ``topicName readQueueNums writeQueueNums perm topicFilterType``, one
space apart, 5.x adding `` attributesJSON``; topicSysFlag and order are not carried (0, false).
The static-topic mappings are not read: this name server serves no static topics.

House rule: the body inflates into at most MAX_INFLATED_BYTES, however small it is; a zip bomb
is refused with a sentence, never inflated whole.
"""

from __future__ import annotations

import json
import struct
import zlib

from cluster.namesrv.headers import MAX_TOPICS_PER_REGISTRATION
from cluster.remoting.body import JsonBody
from cluster.remoting.header import HeaderError

# An uncompressed registration must fit one 16 MiB frame; compressed, a broker sends more
# topics than that holds (the reason to compress), but MAX_TOPICS_PER_REGISTRATION of them
# take a few MiB in text form. Twice a frame leaves room for long names and attributes.
MAX_INFLATED_BYTES = 32 * 1024 * 1024

_LENGTH = struct.Struct(">i")
_WHAT = "the compressed registration body"


def inflate(body: bytes, limit: int = MAX_INFLATED_BYTES) -> bytes:
    """The inflated bytes, or HeaderError when they do not inflate or would pass ``limit``."""
    inflater = zlib.decompressobj()
    try:
        # max_length: never more than limit + 1 bytes in memory, whatever the ratio.
        data = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise HeaderError(f"{_WHAT} does not inflate: {exc}") from None
    if len(data) > limit:
        raise HeaderError(f"{_WHAT} inflates past {limit} bytes; the limit is {limit}")
    return data


class _Reader:
    """Length-prefixed fields of the inflated bytes, in order."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.offset = 0

    def length(self, what: str) -> int:
        if self.offset + 4 > len(self.data):
            raise HeaderError(f"{_WHAT} ends before {what}")
        (value,) = _LENGTH.unpack_from(self.data, self.offset)
        self.offset += 4
        if value < 0:
            raise HeaderError(f"{_WHAT} gives {what} as {value}")
        return value

    def field(self, what: str) -> bytes:
        size = self.length(f"the length of {what}")
        end = self.offset + size
        if end > len(self.data):
            raise HeaderError(f"{_WHAT} ends inside {what} ({size} bytes announced, "
                              f"{len(self.data) - self.offset} left)")
        value = self.data[self.offset:end]
        self.offset = end
        return value


def _topic_config(text: bytes, index: int, skipped: list[str]) -> dict | None:
    """One topic's text form as the JSON form's fields; None (and a reason) when it is not one.
    The numbers stay text: headers.py checks them as it checks the JSON form's."""
    try:
        line = text.decode("utf-8")
    except UnicodeDecodeError:
        skipped.append(f"registration topic config {index} is not UTF-8 text")
        return None
    parts = line.split(" ")
    while parts and not parts[-1]:  # as Java's String.split drops trailing empty strings
        parts.pop()
    if len(parts) < 5:
        skipped.append(f"registration topic config {index} = {line[:80]!r} is not 'topicName "
                       f"readQueueNums writeQueueNums perm topicFilterType'")
        return None
    name, read, write, perm = parts[:4]
    return {"topicName": name, "readQueueNums": read, "writeQueueNums": write, "perm": perm}


def inflate_registration(body: bytes, skipped: list[str]) -> JsonBody:
    """The compressed body as the JSON registration body (``topicConfigSerializeWrapper`` and
    ``filterServerList``); HeaderError when it is not one. Topic configs that do not decode are
    left out with their reason appended to ``skipped``, as the JSON form's are."""
    reader = _Reader(inflate(body))
    version = JsonBody.parse(reader.field("the data version"), "registration.dataVersion")
    count = reader.length("the topic count")
    if count > MAX_TOPICS_PER_REGISTRATION:
        raise HeaderError(f"a registration lists {count} topics; the limit is "
                          f"{MAX_TOPICS_PER_REGISTRATION}")
    table: dict[str, dict] = {}
    for index in range(count):
        config = _topic_config(reader.field(f"topic config {index}"), index, skipped)
        if config is not None:
            table[config["topicName"]] = config
    servers_json = reader.field("the filter server list")
    try:
        servers = json.loads(servers_json)
    except (ValueError, RecursionError):
        servers = None
    # A list that does not parse registers without filter servers, as in RocketMQ.
    filter_servers = servers if isinstance(servers, list) else []
    return JsonBody({"topicConfigSerializeWrapper": {"dataVersion": version.data,
                                                     "topicConfigTable": table},
                     "filterServerList": filter_servers}, "registration")
