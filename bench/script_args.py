"""Command lines of the ``bench/`` scripts: a parser whose help is the script's first
paragraph, and an option type that refuses, before any work, values no run can use."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def script_parser(doc: str) -> argparse.ArgumentParser:
    """A parser described by ``doc``'s first paragraph (the script's docstring)."""
    return argparse.ArgumentParser(description=" ".join(doc.split("\n\n")[0].split()))


def above(
    kind: Callable[[str], float], low: float = 0, *, or_equal: bool = False
) -> Callable[[str], float]:
    """An option type: ``kind(text)`` (``int``, ``float``), refused (argparse's usage
    error, exit 2) unless greater than ``low`` (or equal, with ``or_equal``)."""

    def convert(text: str) -> float:
        value = kind(text)
        if not (value >= low if or_equal else value > low):
            raise argparse.ArgumentTypeError(f"{text}: must be {'>=' if or_equal else '>'} {low}")
        return value

    convert.__name__ = kind.__name__  # argparse names the type in its messages
    return convert
