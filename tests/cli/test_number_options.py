"""Float options refuse NaN (which passes ``click.FloatRange``'s comparisons: a NaN time
limit made a search run forever, a NaN or infinite ``--latency`` crashed ``tidgap profile``
on writing JSON) and infinity where a value must be finite; time limits take infinity
(stop on Ctrl-C)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import Result

from tests.support.cli_helpers import describe, run_cli

#: ``(command and arguments before the option, option, takes infinity)`` for every float
#: option; file arguments need not exist (options are checked first); ``--generations``
#: makes a search that took the value stop (and the test fail) instead of running on.
SHORT = ("--generations", "1", "--population", "8")
#: A profile that takes a second, for the same reason.
TINY_GPT = ("gpt", "--layers", "1", "--hidden", "8", "--heads", "1", "--seq-len", "4")
TINY_GPT += ("--vocab", "10", "--stages", "1", "--batch-size", "2", "--repeats", "1")
FLOAT_OPTIONS = [
    (("search", "example:tiny-2", *SHORT), "--time-limit", True),
    (("search", "example:tiny-2", *SHORT, "--checkpoint", "c.state"), "--checkpoint-every", False),
    (("sweep", "example:tiny-2", "--out-dir", "out", *SHORT), "--time-limit", True),
    (("export", "example:tiny-2", "plan.json", "--to", "same-partition"), "--time-limit", True),
    (("profile", *TINY_GPT, "--out", "p.json"), "--bandwidth", False),
    (("profile", *TINY_GPT, "--out", "p.json"), "--latency", False),
    (("profile", *TINY_GPT, "--out", "p.json", "--optimizer", "sgd"), "--lr", False),
    (("synth",), "--heterogeneity", False),
    (("run", "problem.json", "plan.json", "--model", "gpt"), "--timeout", False),
]
IDS = [f"{args[0]}{option}" for args, option, _ in FLOAT_OPTIONS]


def _refused(result: Result, option: str, *reasons: str) -> None:
    """Exit 2 with one line naming ``option`` and one of ``reasons``."""
    assert result.exit_code == 2, describe(result)
    assert result.stderr.count("\n") == 1, result.stderr
    assert option in result.stderr, result.stderr
    assert any(reason in result.stderr for reason in reasons or ("is not a finite number",))


@pytest.mark.parametrize(("args", "option", "infinite"), FLOAT_OPTIONS, ids=IDS)
def test_nan_is_refused_in_one_line(
    args: tuple[str, ...], option: str, infinite: bool, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for value in ("nan", "NaN", "-nan"):
        _refused(run_cli(*args, option, value), option)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "option"),
    [(args, option) for args, option, infinite in FLOAT_OPTIONS if not infinite],
    ids=[i for i, (_, _, infinite) in zip(IDS, FLOAT_OPTIONS, strict=True) if not infinite],
)
def test_infinity_is_refused_where_a_value_must_be_finite(
    args: tuple[str, ...], option: str, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    # or, where the range has a maximum, by the range itself
    _refused(run_cli(*args, option, "inf"), option, "is not a finite number", "not in the range")


def test_the_range_still_applies() -> None:
    result = run_cli("search", "example:tiny-2", "--time-limit", "-1")
    assert result.exit_code == 2 and "-1.0 is not in the range x>=0" in result.stderr


def test_an_infinite_time_limit_searches_until_another_rule_stops_it() -> None:
    result = run_cli("search", "example:tiny-2", "--time-limit", "inf", *SHORT)
    assert result.exit_code == 0, describe(result)
    assert "stopped on generations" in result.stdout


@pytest.mark.parametrize(
    ("option", "value", "reason"),
    [
        ("--latency", "1e300", "1e+300 is not in the range 0<=x<=1000000000.0"),
        ("--bandwidth", "1e-300", "1e-300 is not in the range 1e-09<=x<=1000000000.0"),
    ],
)
def test_link_guesses_that_would_break_the_time_bound_are_refused_before_profiling(
    option: str, value: str, reason: str, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _refused(run_cli("profile", *TINY_GPT, "--out", "p.json", option, value), option, reason)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args",
    [
        ("search", "example:tiny-2", *SHORT),
        ("sweep", "example:tiny-2", "--out-dir", "out", *SHORT),
        ("export", "example:tiny-2", "plan.json", "--to", "same-partition"),
        ("synth",),
    ],
    ids=["search", "sweep", "export", "synth"],
)
def test_a_seed_longer_than_files_keep_is_refused(
    args: tuple[str, ...], tmp_path: Path, monkeypatch
) -> None:
    """A seed of over 100 digits went into plans, states and problems that tidgap then
    refused to read (``search.seed: integer with 120 digits``); 100 digits are taken."""
    monkeypatch.chdir(tmp_path)
    _refused(run_cli(*args, "--seed", "9" * 101), "--seed", "more than 100 digits")
    assert list(tmp_path.iterdir()) == []
    if args[0] in ("search", "synth"):
        taken = run_cli(*args, "--seed", "-" + "9" * 100, "--json")
        assert taken.exit_code == 0, describe(taken)
