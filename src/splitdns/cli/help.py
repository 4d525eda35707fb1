"""How the command line speaks to a user who got it wrong or asked for help: help texts wrapped to
the terminal with their defaults, and the command, choice or flag a typo most likely meant.
Tests: tests/test_cli.py.
"""

from __future__ import annotations

import argparse
import re
import textwrap
from typing import Any


class HelpFormatter(argparse.HelpFormatter):
    """Wraps every text to the terminal (argparse reads $COLUMNS, else the terminal's width), keeps
    the line breaks of texts that have them (the exit-code lists), and shows each option's default."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out = []
        for line in text.splitlines():
            stripped = line.lstrip()
            # A list item ("  2  at least one error") wraps under its text, not under its number.
            item = re.match(r"\s*\S+\s+", line) if line.startswith(" ") else None
            hang = " " * len(item.group(0)) if item else " " * (len(line) - len(stripped))
            lead = line[: len(line) - len(stripped)]
            out.append(textwrap.fill(stripped, width, initial_indent=indent + lead,
                                     subsequent_indent=indent + hang, break_on_hyphens=False)
                       if stripped else "")
        return "\n".join(out)

    def _split_lines(self, text: str, width: int) -> list[str]:
        # Never at a hyphen: an image name or a flag cut in two cannot be copied from the help.
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        shown = f"{default:g}" if isinstance(default, float) else str(default)  # 10.0 reads "10"
        if (text and default not in (None, False, [], argparse.SUPPRESS) and shown not in text
                and (action.option_strings or action.nargs in ("?", "*"))):
            # Inside the sentence: "The cluster domain (default: cluster.local)."
            stop = "." if text.endswith(".") else ""
            text = text.removesuffix(".") + " (default: %(default)s)" + stop
        return text


class Parser(argparse.ArgumentParser):
    """An ArgumentParser that formats its help with HelpFormatter and names the choice a typo most
    likely meant (`chek` -> `check`), for commands and for flags with choices alike."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        # argparse's own check, plus the likely choice.
        if action.choices is not None and value not in action.choices:
            import difflib  # only for a typo: `serve` does not load it to start

            choices = [str(c) for c in action.choices]
            guess = difflib.get_close_matches(str(value), choices, n=1, cutoff=0.6)
            hint = f"; did you mean {guess[0]}?" if guess else ""
            raise argparse.ArgumentError(
                action, f"invalid choice: {value} (choose from {', '.join(choices)}){hint}")


def reject_unrecognized(parser: argparse.ArgumentParser, command: str, unknown: list[str]) -> None:
    """argparse's "unrecognized arguments", from the command's own parser, with the flag a typo most
    likely meant (`--breif` -> `--brief`); exits 2, as argparse does."""
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub: argparse.ArgumentParser = subs.choices[command]
    flags = [flag for action in sub._actions for flag in action.option_strings]
    import difflib  # only for a typo: `serve` does not load it to start

    words = []
    for word in unknown:
        guess = difflib.get_close_matches(word.split("=")[0], flags, n=1, cutoff=0.75) \
            if word.startswith("-") else []
        words.append(f"{word} (did you mean {guess[0]}?)" if guess else word)
    sub.error(f"unrecognized arguments: {' '.join(words)}")


def port_number(text: str) -> int:
    """A port number, checked where the flag is read: 99999 is a usage error, not a traceback."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text} is not a port number") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port (1 to 65535)")
    return port
