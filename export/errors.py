"""Typed errors of the export; each message is a sentence a user can act on."""

from __future__ import annotations

from common.errors import RocketDeskError


class ExportError(RocketDeskError):
    """Base of export errors."""


class OptionError(ExportError):
    """An option that is unknown or has a value that cannot work."""


class DataLossError(ExportError):
    """Messages the plan counted on are gone (expired files, a queue that vanished)."""
