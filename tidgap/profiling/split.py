"""Where stages begin: a balanced split of measured layer costs, or one given by ``--split``.

A split of ``L`` layers into ``S`` stages is given by its ``S - 1`` boundaries: the
indices of the layers that begin stages ``1 .. S-1``, strictly increasing in ``1 .. L-1``.
"""

from __future__ import annotations

from collections.abc import Sequence

from tidgap.model.errors import InputError
from tidgap.model.text import unique_labels

SOURCE = "--split"


def balanced_split(costs: Sequence[float], stages: int) -> list[int]:
    """Boundaries cutting ``costs`` into ``stages`` consecutive non-empty groups so that the
    largest group sum is least (dynamic programming, ``O(S * L^2)``); ties go to the
    earliest boundaries."""
    count = len(costs)
    if not 1 <= stages <= count:
        raise ValueError(f"cannot split {count} layers into {stages} stages")
    prefix = [0.0]
    for cost in costs:
        prefix.append(prefix[-1] + cost)
    # best[k][j]: least largest sum splitting the first j layers into k groups
    best = [[float("inf")] * (count + 1) for _ in range(stages + 1)]
    start = [[0] * (count + 1) for _ in range(stages + 1)]
    best[0][0] = 0.0
    for k in range(1, stages + 1):
        for j in range(k, count + 1):
            for i in range(k - 1, j):
                value = max(best[k - 1][i], prefix[j] - prefix[i])
                if value < best[k][j]:
                    best[k][j], start[k][j] = value, i
    boundaries, j = [], count
    for k in range(stages, 1, -1):
        j = start[k][j]
        boundaries.append(j)
    return boundaries[::-1]


def parse_split(
    text: str, layer_names: Sequence[str], stages: int, by_name: bool = True
) -> list[int]:
    """The boundaries in ``--split`` (comma-separated layer indices or, where ``by_name``,
    layer names; a digit that names one layer and indexes another is refused as
    ambiguous); a bad value raises :class:`InputError` naming ``--split``."""
    items = [item.strip() for item in text.split(",")] if text.strip() else []
    if len(items) != stages - 1:
        raise InputError(
            f"{stages} stages need {stages - 1} boundaries (the first layer of stages 1.."
            f"{stages - 1}), got {len(items)}",
            source=SOURCE,
        )
    positions = {name: i for i, name in enumerate(layer_names)} if by_name else {}
    last = len(layer_names) - 1
    boundaries: list[int] = []
    for item in items:
        if item in positions:
            boundary = positions[item]
            if item.isdigit() and int(item) != boundary and int(item) <= last:
                raise InputError(
                    f"{item!r} is ambiguous: layer {boundary} is named {item!r}, and layer "
                    f"{item} is another (name the layers apart, or split by other names)",
                    source=SOURCE,
                )
        else:
            try:
                boundary = int(item)
            except ValueError:
                raise InputError(
                    f"{item!r} is neither a layer index nor a layer name "
                    f"(layers: {_shorten(layer_names)})",
                    source=SOURCE,
                ) from None
        if not 1 <= boundary <= last:
            raise InputError(
                f"boundary {item} is out of range 1..{last} (the model has "
                f"{len(layer_names)} layers, 0..{last}; layer 0 always begins stage 0)",
                source=SOURCE,
            )
        if boundaries and boundary <= boundaries[-1]:
            raise InputError(
                f"boundaries must be strictly increasing ({item} follows {boundaries[-1]})",
                source=SOURCE,
            )
        boundaries.append(boundary)
    return boundaries


def groups(count: int, boundaries: Sequence[int]) -> list[range]:
    """The layer index ranges of each stage."""
    edges = [0, *boundaries, count]
    return [range(edges[s], edges[s + 1]) for s in range(len(edges) - 1)]


def stage_layers(names: Sequence[str], boundaries: Sequence[int]) -> dict[str, list[str]]:
    """Per stage, in order, its name (``first-last`` layer, or its one layer; numbered
    where another stage has it: :func:`~tidgap.model.text.unique_labels`) and its layers'
    names, for the model's layers ``names`` split at ``boundaries``."""
    layers = [[names[i] for i in layer_range] for layer_range in groups(len(names), boundaries)]
    labels = [group[0] if len(group) == 1 else f"{group[0]}-{group[-1]}" for group in layers]
    return dict(zip(unique_labels(labels), layers, strict=True))


def _shorten(names: Sequence[str], most: int = 12) -> str:
    """The names, comma-separated, with the middle elided past ``most`` of them."""
    if len(names) <= most:
        return ", ".join(names)
    return ", ".join([*names[: most - 2], "...", names[-1]])
