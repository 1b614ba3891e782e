"""The `reslab` command: the root parser, the verbs' parsers added in order, and main, which
parses, calls one function per verb and turns errors into one line.

User errors (ReslabError, ConfigError) print one line each on stderr and exit with status 2; a path
the operating system refuses (OSError) is one line naming it. Anything else is a bug in reslab: one
line `reslab: internal error: ...` and exit status 1 (RESLAB_DEBUG=1 shows the traceback instead).
"""

from __future__ import annotations

import argparse
import os
import sys

from ..errors import ReslabError
from . import assess, data, hf, model, presets, probe, report, runs, study, sweep, train
from .args import Parser

# The verb modules in the order `reslab --help` lists their verbs; `completion` comes last.
VERBS = (model, train, data, probe, sweep, runs, report, study, assess, presets, hf)


def cmd_completion(args) -> None:
    from ..completion import script

    print(script(_parser(), args.shell))


def build_parser() -> argparse.ArgumentParser:
    from .._version import __version__

    p = Parser(prog="reslab", description="A laboratory for residual connections in Transformers.",
               epilog="Designs of your own: --plugin MODULE (before or after the verb, repeatable), "
                      "RESLAB_PLUGINS=mod1,mod2, or an installed 'reslab.designs' entry point.")
    p.add_argument("--version", action="version", version=f"reslab {__version__}")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                   help="import MODULE first: it registers designs with reslab.register_design")
    sub = p.add_subparsers(dest="verb", required=True, parser_class=Parser)
    for verbs in VERBS:
        verbs.add_parsers(sub)

    c = sub.add_parser("completion", help="print a shell completion script: eval \"$(reslab completion bash)\"")
    c.add_argument("shell", choices=["bash", "zsh"])
    c.set_defaults(func=cmd_completion, needs_torch=False)
    return p


_PARSER: argparse.ArgumentParser | None = None


def _parser() -> argparse.ArgumentParser:
    """The parser, built once per process (building it costs more than most verbs' checks)."""
    global _PARSER
    if _PARSER is None:
        _PARSER = build_parser()
    return _PARSER


def _say(text: str) -> None:
    """One line on stderr, whatever the text holds (newlines, characters stderr cannot encode)."""
    line = " ".join(text.splitlines()) or "(no message)"
    encoding = getattr(sys.stderr, "encoding", None) or "utf-8"
    print(line.encode(encoding, "backslashreplace").decode(encoding), file=sys.stderr)


def _first_line(e: BaseException) -> str:
    return next((line.strip() for line in str(e).splitlines() if line.strip()), "")


def _is_out_of_memory(e: BaseException) -> bool:
    return isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError" or \
        (isinstance(e, RuntimeError) and "can't allocate memory" in str(e))


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush does not raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file descriptor (captured in a test)
        pass


def main(argv: list[str] | None = None) -> int:
    debug = os.environ.get("RESLAB_DEBUG", "") not in ("", "0")
    try:
        from ..plugins import add_to_environment, env_modules, load_plugins, take_plugin_flags

        argv, modules = take_plugin_flags(list(sys.argv[1:] if argv is None else argv))
        if modules or env_modules():  # named by the user: one that cannot be imported stops every verb
            load_plugins(modules)
            add_to_environment(modules)  # sweep workers, started in fresh processes, load them too
        args = _parser().parse_args(argv)
        if getattr(args, "needs_torch", True):  # the listings and completion run without it
            from ..compat import TorchTooOld, require_torch

            try:
                require_torch()
            except TorchTooOld as e:
                raise ReslabError(str(e)) from None
        status = args.func(args)
    except ReslabError as e:
        for line in e.lines():
            _say(f"reslab: error: {line}")
        return 2
    except KeyboardInterrupt:
        _say("reslab: interrupted")
        return 130
    except BrokenPipeError:  # the reader of stdout left (`reslab runs | head`): stop quietly, as Unix tools do
        _silence_stdout()
        return 141  # 128 + SIGPIPE
    except Exception as e:
        if debug:
            raise
        if isinstance(e, OSError) and e.filename is not None:  # a path the system refused
            _say(f"reslab: error: {e.filename}: {e.strerror or _first_line(e)}")
            return 2
        if _is_out_of_memory(e):
            _say(f"reslab: error: out of memory ({_first_line(e)[:200]}); use a smaller model or batch")
            return 1
        what = f"{type(e).__name__}: {_first_line(e)}" if _first_line(e) else type(e).__name__
        _say(f"reslab: internal error: {what} (set RESLAB_DEBUG=1 for the traceback; please report it)")
        return 1
    return status or 0
