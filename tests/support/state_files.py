"""Damage a saved state file (``tidgap.state/1``) as a test needs: its meta or one array."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def rewrite_meta(path: Path, change: Callable[[dict[str, Any]], Any]) -> None:
    """Apply ``change`` to the state's ``meta`` (a dict, in place) and write it back."""
    with np.load(path) as archive:
        arrays = {name: archive[name] for name in archive.files}
    meta = json.loads(str(arrays.pop("meta")))
    change(meta)
    with path.open("wb") as file:  # a file, not a name: savez would add ".npz"
        np.savez(file, meta=np.array(json.dumps(meta)), **arrays)


def rewrite_array(path: Path, name: str, change: Callable[[np.ndarray], np.ndarray]) -> None:
    """Replace the state's array ``name`` with ``change`` of it."""
    with np.load(path) as archive:
        arrays = {key: archive[key] for key in archive.files}
    arrays[name] = change(arrays[name])
    with path.open("wb") as file:
        np.savez(file, **arrays)
