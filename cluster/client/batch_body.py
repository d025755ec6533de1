"""A producer's SEND_BATCH_MESSAGE body and its messages' UNIQ_KEY ids, in one step.

The common batch is messages with no properties of their own: each entry's properties are its
TAGS, KEYS, DELAY and WAIT, as a single send writes them, and the new UNIQ_KEY. Made in Python
that is a properties string, an id and four byte strings a message (38 µs for 32 messages of
1 KiB: a seventh of one batch sender's round trip); common/_batch_body.c makes the whole body
in one call. Anything else (own properties, keys given as a list, a field of an unusual type,
a value out of the format's range) gives None, and the producer goes its general way, which
words any error. :func:`batch_body_pure` is the compiled function's twin: the same body and
ids, or None, for any input (tests/unit/client/test_batch_body.py).

Entry layout (MessageDecoder.encodeMessages; storage/record.py reads it): TOTALSIZE i32 |
MAGICCODE i32 (0) | BODYCRC i32 (0) | FLAG i32 | BODYLEN i32 | BODY | PROPERTIESLEN u16 |
PROPERTIES.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from common import speedups
from storage.record import BATCH_ENTRY_HEAD

# The Message attributes read, in the order the compiled function takes them.
NAMES = ("properties", "body", "tags", "keys", "flag", "delay_time_level", "wait_store_msg_ok")

_INT32 = range(-(1 << 31), 1 << 31)
_INT64 = range(-(1 << 63), 1 << 63)
_ENTRY_FIXED = BATCH_ENTRY_HEAD.size + 2  # (the head's five fields, PROPERTIESLEN)


def _text(value) -> str | None:
    """A tag or keys value as written ("" for none), or None when not the common case."""
    if value is None:
        return ""
    if type(value) is not str:
        return None
    try:
        value.encode()
    except UnicodeEncodeError:  # (a lone surrogate: the general way raises it)
        return None
    return value


def batch_body_pure(names: tuple[str, ...], messages: list, head: str,
                    first: int) -> tuple[bytes, list[str]] | None:
    """The body of ``messages`` and their ids (``head`` and the four hex digits of ``first`` +
    i, modulo 65,536), or None when one is not the common case."""
    if not head.isascii() or type(messages) is not list:
        return None
    parts: list[bytes] = []
    ids: list[str] = []
    for index, msg in enumerate(messages):
        if getattr(msg, names[0]):
            return None
        body = getattr(msg, names[1])
        if type(body) is not bytes:
            return None
        tags, keys = _text(getattr(msg, names[2])), _text(getattr(msg, names[3]))
        if tags is None or keys is None:
            return None
        flag, delay = getattr(msg, names[4]), getattr(msg, names[5])
        if type(flag) is not int or flag not in _INT32 or type(delay) is not int \
                or delay not in _INT64:
            return None
        uniq = f"{head}{(first + index) & 0xFFFF:04X}"
        props = "".join((
            f"TAGS\x01{tags}\x02" if tags else "",
            f"KEYS\x01{keys}\x02" if keys else "",
            f"DELAY\x01{delay}\x02" if delay > 0 else "",
            "WAIT\x01true\x02" if getattr(msg, names[6]) else "WAIT\x01false\x02",
            f"UNIQ_KEY\x01{uniq}\x02")).encode()
        if len(props) > 0xFFFF or _ENTRY_FIXED + len(body) + len(props) not in _INT32:
            return None
        parts += (BATCH_ENTRY_HEAD.pack(_ENTRY_FIXED + len(body) + len(props), 0, 0, flag,
                                        len(body)),
                  body, len(props).to_bytes(2, "big"), props)
        ids.append(uniq)
    return b"".join(parts), ids


def _chosen() -> Callable[[list, str, int], tuple[bytes, list[str]] | None]:
    compiled = getattr(speedups.store_core, "batch_body", None)
    return functools.partial(compiled or batch_body_pure, NAMES)


# batch_body(messages, head, first): the compiled function, or its twin on the pure path.
batch_body = _chosen()
