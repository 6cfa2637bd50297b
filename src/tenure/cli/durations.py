"""Durations on the command line: ``45s``, ``250ms``, ``15m``, ``12h``, ``7d``, ``2w``, ``1h30m`` or plain seconds."""

from __future__ import annotations

import re

import click

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h|d|w)")
_PLAIN = re.compile(r"\d+(?:\.\d*)?|\.\d+")


def parse_duration(text: str) -> float:
    """Seconds in ``text``; raises ValueError when it is not a duration."""
    raw = text.strip().lower()
    if _PLAIN.fullmatch(raw):
        return float(raw)
    if not raw or _PART.sub("", raw) != "":
        raise ValueError(text)
    return sum(float(number) * _UNITS[unit] for number, unit in _PART.findall(raw))


class Duration(click.ParamType[float]):
    """A click parameter holding a duration, converted to seconds (a float)."""

    name = "duration"

    def __init__(self, *, allow_zero: bool = True) -> None:
        self.allow_zero = allow_zero

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)):
            seconds = float(value)
        else:
            try:
                seconds = parse_duration(str(value))
            except ValueError:
                self.fail(
                    f"{value!r} is not a duration (use e.g. 45s, 15m, 12h, 7d, 2w, 1h30m, or seconds)", param, ctx
                )
        if seconds < 0 or (seconds == 0 and not self.allow_zero):
            self.fail(f"{value!r} must be {'0 or more' if self.allow_zero else 'more than 0'}", param, ctx)
        return seconds
