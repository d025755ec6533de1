"""Typed settings from RocketMQ-style key names (``listenPort`` -> ``listen_port``)."""

from __future__ import annotations

import re
from dataclasses import fields
from enum import Enum

from common.errors import RocketDeskError


class SettingError(RocketDeskError, ValueError):
    """A setting with a value that cannot be used; names the key as the user wrote it."""

    def __init__(self, key: str, value: str, reason: str) -> None:
        super().__init__(f"setting {key}={value!r} is not valid: {reason}")
        self.key = key


def java_key_to_field(key: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", key).lower()


def convert(key: str, raw: str, current: object) -> object:
    """Turn ``raw`` into the type of ``current``, or raise SettingError naming ``key``."""
    raw = raw.strip()
    if isinstance(current, bool):
        if raw.lower() not in ("true", "false"):
            raise SettingError(key, raw, "expected true or false")
        return raw.lower() == "true"
    if isinstance(current, int):
        try:
            return int(raw)
        except ValueError:
            raise SettingError(key, raw, "expected a whole number") from None
    if isinstance(current, Enum):
        try:
            return type(current)(raw.upper())
        except ValueError:
            choices = ", ".join(m.value for m in type(current))
            raise SettingError(key, raw, f"expected one of {choices}") from None
    return raw


def apply_properties(target, props: dict[str, str], aliases: dict[str, str] | None = None) -> list[str]:
    """Set every known key on the dataclass ``target``; returns the keys it does not know."""
    known = {f.name for f in fields(target)}
    unknown = []
    for key, raw in props.items():
        name = (aliases or {}).get(key) or java_key_to_field(key)
        if name not in known:
            unknown.append(key)
            continue
        setattr(target, name, convert(key, raw, getattr(target, name)))
    return unknown
