"""Shared fixtures: the golden cases (copied from the project's shared examples)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

GOLDEN_PATH = Path(__file__).parent / "data" / "golden.json"


def golden_cases() -> list[dict[str, Any]]:
    """Every case of ``tests/data/golden.json`` (``tidgap.golden/1``)."""
    document = json.loads(GOLDEN_PATH.read_text(encoding="utf-8"))
    assert document["format"] == "tidgap.golden/1"
    return document["cases"]


def flush_searchable_cases() -> list[dict[str, Any]]:
    """The golden cases some flush plan fits: the ``_mem`` cases' stage 0 cannot hold the
    batch, so a flush search refuses them (tests/model/test_memory_fields.py checks it)."""
    from tidgap import InputError, Problem
    from tidgap.schedules.held import require_flush_fits

    cases = []
    for case in golden_cases():
        try:
            require_flush_fits(Problem.from_dict(case["problem"]))
        except InputError:
            continue
        cases.append(case)
    return cases


def case_id(case: dict[str, Any]) -> str:
    """The problem name, for test ids."""
    return case["problem"]["name"]


@pytest.fixture(params=golden_cases(), ids=case_id)
def golden_case(request: pytest.FixtureRequest) -> dict[str, Any]:
    """One golden case at a time."""
    return request.param
