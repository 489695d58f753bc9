"""The golden ordered plans (``ordered_plans`` of ``tests/data/golden.json``) as plans, plan
documents and test parameters."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support.cli_helpers import PLAN_FORMAT, Case, case_named, golden_cases
from tidgap import Plan

#: The golden cases whose problems give ``activation_bytes`` (and some ``memory_limit``).
MEMORY_CASES = ("tiny7_1_mem", "med7_1_mem")


def ordered_entry(name: str, index: int) -> dict[str, Any]:
    """Ordered plan ``index`` of the golden case ``name`` (a fresh copy)."""
    return case_named(name)["ordered_plans"][index]


def ordered_plan(entry: dict[str, Any]) -> Plan:
    """The plan of a golden ordered-plan (or invalid-order) entry: ``order`` or ``windows``
    as given."""
    return Plan.of(
        entry["forward"], entry["backward"], order=entry.get("order"), windows=entry.get("windows")
    )


def ordered_document(entry: dict[str, Any]) -> dict[str, Any]:
    """A golden ordered-plan (or invalid-order) entry as a ``tidgap.plan/1`` document."""
    keys = ("forward", "backward", "order", "windows")
    return {"format": PLAN_FORMAT} | {k: copy.deepcopy(entry[k]) for k in keys if k in entry}


def ordered_params(names: tuple[str, ...] | None = None, key: str = "ordered_plans") -> list[Any]:
    """``(case name, index)`` of every golden ordered plan (of the cases ``names``, or all),
    or with ``key="invalid_orders"`` of every golden invalid order."""
    cases: list[Case] = golden_cases()
    short = "ordered" if key == "ordered_plans" else "invalid"
    return [
        pytest.param(case["problem"]["name"], i, id=f"{case['problem']['name']}-{short}{i}")
        for case in cases
        if names is None or case["problem"]["name"] in names
        for i in range(len(case.get(key, [])))
    ]
