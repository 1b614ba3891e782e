"""`reslab presets`: the built-in run presets, each with its first line."""

from __future__ import annotations


def cmd_presets(args) -> None:
    from ..train.config import preset_names, preset_path

    for name in preset_names():
        first = preset_path(name).read_text().splitlines()[0].lstrip("# ")
        print(f"{name:<22} {first}")


def add_parsers(sub) -> None:
    pr = sub.add_parser("presets", help="list the built-in run presets")
    pr.set_defaults(func=cmd_presets, needs_torch=False)
