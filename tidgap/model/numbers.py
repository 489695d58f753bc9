"""What tidgap takes as an integer from input (files, options, API arguments), and the
largest counts it takes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from tidgap.model.errors import InputError

#: The largest count tidgap takes (a C ``int``): samples, sizes, rounds, iterations.
MAX_COUNT = 2**31 - 1
#: The most stages a command builds a problem or a run for, and threads per process.
MAX_STAGES = 1024
MAX_THREADS = 1024
#: The largest seed tidgap passes to PyTorch (``torch.manual_seed`` takes ``0..2**63-1``).
MAX_TORCH_SEED = 2**63 - 1


def positive_integer_text(text: str) -> int | None:
    """The positive integer ``text`` writes as ``int()`` reads it (``"+4"``, `` 4 ``), or
    ``None`` (``"0"``, ``"abc"``, ``"²"``, which ``str.isdigit`` takes and ``int`` does not)."""
    try:
        value = int(text)
    except ValueError:
        return None
    return value if value > 0 else None


def is_integer(value: Any) -> bool:
    """Whether ``value`` is an integer, Python's or NumPy's; ``True`` and ``False`` are not."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_number(value: Any) -> bool:
    """Whether ``value`` is a real number, Python's or NumPy's (NaN and infinity too);
    ``True`` and ``False`` are not."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )


def integer_at_least(name: str, value: Any, least: int | None) -> None:
    """:class:`InputError` naming ``name`` unless ``value`` is an integer, at least
    ``least`` (``None``: any)."""
    if not is_integer(value):
        raise InputError(f"must be an integer (got {value!r})", source=name)
    if least is not None and value < least:
        raise InputError(f"must be at least {least} (got {value})", source=name)


def plain(value: Any) -> Any:
    """``value`` (a document or a part of one built in Python) with NumPy's scalars and
    arrays as Python's (``np.int64(8)`` -> ``8``, an array -> a list), in lists and dict
    values at any depth; so NumPy numbers are the integers and numbers they are, and a
    NumPy bool is still no integer."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, np.ndarray) and value.dtype != object:
        return value.tolist()  # Python's numbers at any depth, at once
    if isinstance(value, (list, tuple, np.ndarray)):  # Python's ints as they are, at once
        return [item if type(item) is int else plain(item) for item in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def copied_list(items: Any) -> Any:
    """A list of ``items`` when it is an iterable other than text or a mapping (a list, a
    range, a generator; NumPy's values as Python's); anything else as it is, for validation
    to refuse (``list("FFBB")`` made one stage of each letter, ``list(3)`` a
    ``TypeError``)."""
    items = plain(items)
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
        return items
    return list(items)
