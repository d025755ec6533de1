"""Figures of a node's resources as people read them; the command line and the console both show
the supervisor's status with these."""

from __future__ import annotations


def human_bytes(value: float | None) -> str:
    """1536 -> '1.5 KiB'; None -> '-'."""
    if value is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return "-"
