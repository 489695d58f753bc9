"""Damage a saved state file (``tidgap.state/1``) as a test needs, and stop a search once
its state file shows a point reached."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tidgap.optimize.checkpoint import ANNEAL_PHASE, load_state


def rewrite_arrays(path: Path, change: Callable[[dict[str, np.ndarray]], Any]) -> None:
    """Apply ``change`` to the state's arrays (a dict, ``meta`` included, changed in place)
    and write them back uncompressed."""
    with np.load(path) as archive:
        arrays = {name: archive[name] for name in archive.files}
    change(arrays)
    with path.open("wb") as file:  # a file, not a name: savez would add ".npz"
        np.savez(file, **arrays)


def rewrite_meta(path: Path, change: Callable[[dict[str, Any]], Any]) -> None:
    """Apply ``change`` to the state's ``meta`` (a dict, in place) and write it back."""

    def on_meta(arrays: dict[str, np.ndarray]) -> None:
        meta = json.loads(str(arrays["meta"]))
        change(meta)
        arrays["meta"] = np.array(json.dumps(meta))

    rewrite_arrays(path, on_meta)


def rewrite_array(path: Path, name: str, change: Callable[[np.ndarray], np.ndarray]) -> None:
    """Replace the state's array ``name`` with ``change`` of it."""
    rewrite_arrays(path, lambda arrays: arrays.update({name: change(arrays[name])}))


def signal_once_saved(
    path: Path, reached: Callable[[dict[str, Any]], bool]
) -> Callable[[], str | None]:
    """An ``interrupted`` that names SIGINT once the state at ``path`` has a ``meta`` that
    ``reached`` accepts (a Ctrl-C then)."""

    def interrupted() -> str | None:
        if not path.exists():
            return None
        return "SIGINT" if reached(load_state(path).meta) else None

    return interrupted


def in_annealing(step: int) -> Callable[[dict[str, Any]], bool]:
    """Whether a state's ``meta`` was saved in the annealing at ``step`` or later."""
    return lambda meta: meta["phase"] == ANNEAL_PHASE and meta["anneal"]["step"] >= step


def signal_in_annealing(path: Path, step: int) -> Callable[[], str | None]:
    """An ``interrupted`` that names SIGINT once the state at ``path`` was saved in the
    annealing at ``step`` or later (a Ctrl-C there)."""
    return signal_once_saved(path, in_annealing(step))


def stopped_once_saved(
    problem: Any, path: Path, reached: Callable[[dict[str, Any]], bool], **options: Any
) -> Any:
    """``tidgap.search(problem, **options)`` saving its state at ``path`` at every chance and
    stopped by a SIGINT once the state's ``meta`` is one ``reached`` accepts; its result."""
    from tidgap import search

    stop = signal_once_saved(path, reached)
    return search(problem, checkpoint=path, checkpoint_every=1e-9, interrupted=stop, **options)


def stopped_in_annealing(problem: Any, path: Path, step: int, **options: Any) -> Any:
    """:func:`stopped_once_saved` once its annealing saved step ``step``."""
    return stopped_once_saved(problem, path, in_annealing(step), **options)


def same_search(result: Any, other: Any) -> bool:
    """Whether two search results have the same plan (partitions and order), generations
    and evaluations: what a resumed search must give of the unbroken one."""
    return _outcome(result) == _outcome(other)


def _outcome(result: Any) -> tuple:
    """A search result's plan (partitions, order), generations and evaluations."""
    plan = result.plan
    return plan.forward, plan.backward, plan.order, result.generations, result.evaluations
