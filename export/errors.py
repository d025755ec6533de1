"""Typed errors of the export; each message is a sentence a user can act on."""

from __future__ import annotations

from common.errors import RocketDeskError


class ExportError(RocketDeskError):
    """Base of export errors."""


class OptionError(ExportError):
    """An option that is unknown or has a value that cannot work."""


class DataLossError(ExportError):
    """Messages the plan counted on are gone (expired files, a queue that vanished)."""


def damaged_record(offset: int) -> DataLossError:
    """A record whose body, topic and properties do not fit the size it gives: the export
    stops rather than hand on the bytes after it as its own."""
    return DataLossError(f"the record at CommitLog offset {offset} is damaged: its body, topic "
                         "and properties run past the size it gives")
