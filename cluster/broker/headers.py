"""Reading request headers (extFields) into typed values, with RocketMQ's error for a missing one."""

from __future__ import annotations

from cluster.remoting.codec import RemotingCommand

# SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE use one-letter names for SendMessageRequestHeader fields.
SEND_V2_NAMES = {
    "a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums",
    "e": "queueId", "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties",
    "j": "reconsumeTimes", "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch", "n": "bname",
}


class HeaderError(Exception):
    """A required header field is missing or not a number; the broker answers SYSTEM_ERROR."""


def header_processor(handler):
    """Wrap ``handler(self, command, header)`` as a processor: a bad header is a SYSTEM_ERROR."""

    async def run(self, connection, command: RemotingCommand):
        try:
            return handler(self, command, Header(command))
        except HeaderError as exc:
            return command.make_response(1, str(exc))  # SYSTEM_ERROR

    return run


class Header:
    """Typed access to a command's extFields."""

    def __init__(self, command: RemotingCommand, aliases: dict[str, str] | None = None) -> None:
        fields = dict(command.ext_fields)
        if aliases:
            for short, long in aliases.items():
                if short in fields and long not in fields:
                    fields[long] = fields.pop(short)
        self.fields = fields

    def str(self, name: str, default: str | None = None, required: bool = False) -> str | None:
        value = self.fields.get(name)
        if value is None or value == "":
            if required:
                raise HeaderError(f"the request header lacks {name}")
            return default
        return value

    def int(self, name: str, default: int | None = None, required: bool = False) -> int | None:
        value = self.str(name, None, required)
        if value is None:
            return default
        try:
            return int(value)
        except ValueError:
            try:
                return int(float(value))
            except ValueError:
                raise HeaderError(f"header field {name}={value!r} is not a number") from None

    def bool(self, name: str, default: bool = False) -> bool:
        value = self.str(name)
        return default if value is None else value.lower() == "true"
