"""Counts and sizes on the command line: a whole number of at least one, or argparse's sentence
naming the option (a negative count was taken as counting from the end, 0 as "all", a
negative size failed deep inside with a message naming no option)."""

from __future__ import annotations

import argparse


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value
