"""What the verbs' parsers share: the parser class whose errors are one line, flag types that refuse
a bad value while parsing (before any verb runs), and the flags of a verb that reads a run config."""

from __future__ import annotations

import argparse
import math

from ..errors import ReslabError
from ..typed import short_int


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not usage + message
        raise ReslabError(f"{self.prog}: {message} (see {self.prog} --help)")

    def add_argument(self, *args, **kwargs):
        """A flag that takes one value may be given once: argparse would keep the last of two silently
        (`--preset tiny --preset nanogpt-cpu` ran the second)."""
        if args and str(args[0]).startswith("-") and kwargs.get("action", "store") == "store":
            kwargs["action"] = _StoreOnce
        return super().add_argument(*args, **kwargs)


class _StoreOnce(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        given = namespace.__dict__.setdefault("_flags_given", set())
        if self.dest in given:
            raise ReslabError(f"{parser.prog}: {option_string} given twice; give it once "
                              f"(see {parser.prog} --help)")
        given.add(self.dest)
        setattr(namespace, self.dest, values)


# They raise ReslabError (not argparse's ArgumentTypeError), so that the one line names the flag
# whichever parser they are added to (reslab's, or a plain argparse parser in a test).
def int_in(flag: str, lo: int, hi: int):
    """An argparse type: an integer in lo..hi."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ReslabError(f"{flag}: expected an integer, got {text!r}") from None
        if value < lo:
            raise ReslabError(f"{flag}: must be at least {lo}, got {short_int(value)}")
        if value > hi:
            raise ReslabError(f"{flag}: must be at most {hi:,}, got {short_int(value)}")
        return value
    return parse


def positive_finite(flag: str):
    """An argparse type: a number > 0 that is not inf or nan."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ReslabError(f"{flag}: expected a number, got {text!r}") from None
        if not (math.isfinite(value) and value > 0):
            raise ReslabError(f"{flag}: must be a positive finite number, got {text!r}")
        return value
    return parse




def add_run_config_args(parser) -> None:
    """A run config's sources, read by reslab.config_sources.load_run_config."""
    parser.add_argument("config", nargs="?", help="TOML file with [model] [data] [optim] [train] tables")
    parser.add_argument("--preset", help="start from a built-in preset (see `reslab presets`)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override, e.g. --set train.steps=500 (repeatable)")
