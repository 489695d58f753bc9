"""Simulated networks (the UMPIPE paper's "simulation networks"): random problems from a seed.

A reference stage is drawn first; each stage (and link) then multiplies the reference's
parameters by independent factors ``exp(heterogeneity * N(0, 1))``, so heterogeneity 0
gives identical stages and links. Every draw comes from one ``random.Random(seed)`` in a
fixed order: the same arguments give the same document.
"""

from __future__ import annotations

import math
import random
import shlex
from typing import Any

from tidgap.model.numbers import integer_at_least
from tidgap.model.text import without_surrogates
from tidgap.profiling.build import measurement_sizes, non_decreasing, rounded

Json = dict[str, Any]

#: Time-function shapes: ``affine``; ``saturating`` (flat up to a knee, then linear, as a
#: three-point table); ``table`` (measured-like: a smooth knee with a few % of wobble).
SHAPES = ("affine", "saturating", "table")
#: Relative size of the wobble of ``table`` curves (one standard deviation).
WOBBLE = 0.03

DERIVATION = (
    "SYNTHETIC, not a real network and not measured (like the simulation networks of the "
    "UMPIPE paper). From random.Random(seed), a reference stage: forward base U(0.5, 2) ms "
    "and per_sample U(0.02, 0.1) ms, backward = forward times U(1.5, 2.5), knee U(0.05, 0.3) "
    "of the batch, tail U(0.1, 1) ms; a reference link: latency U(0.02, 0.2) ms plus "
    "U(0.001, 0.01) ms per sample, the same both ways. Each stage and link multiplies each "
    "reference parameter by exp(heterogeneity * N(0, 1)). Shapes: affine t(b) = base + "
    "per_sample * b; saturating t(b) = base + per_sample * max(b, knee); table t(b) = base + "
    "per_sample * sqrt(b^2 + knee^2) at unit * 2^k and batch_size, times a wobble "
    f"1 + N(0, {WOBBLE}) shared by all stages, made non-decreasing."
)


def _curve(
    shape: str, base: float, per_sample: float, knee: int, sizes: list[int], wobble: list[float]
) -> Json:
    """One time function of the given shape, in ms for ``b`` samples."""
    if shape == "affine":
        return {"affine": {"base": rounded(base), "per_sample": rounded(per_sample)}}
    if shape == "saturating":
        points = sorted({sizes[0], knee, sizes[-1]})
        times = [rounded(base + per_sample * max(b, knee)) for b in points]
        return {"table": {"sizes": points, "times": times}}
    times = [
        (base + per_sample * math.hypot(b, knee)) * w for b, w in zip(sizes, wobble, strict=True)
    ]
    return {"table": {"sizes": sizes, "times": non_decreasing(times)}}


def synth_problem(
    seed: int,
    stages: int,
    batch_size: int,
    unit: int = 1,
    heterogeneity: float = 0.5,
    shape: str = "affine",
    name: str | None = None,
) -> Json:
    """A random ``tidgap.problem/1`` document (times in ms) for ``stages`` stages.

    ``batch_size`` is a multiple of ``unit``; ``shape`` is one of :data:`SHAPES`; a
    ``name`` holding bytes that are not UTF-8 keeps U+FFFD for them.
    """
    name = without_surrogates(name) if name else name
    integer_at_least("seed", seed, None)
    seed = int(seed)  # a NumPy integer too
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {SHAPES}, got {shape!r}")
    if stages < 1 or unit < 1 or batch_size < 1 or batch_size % unit or heterogeneity < 0:
        raise ValueError(
            "need stages, unit, batch_size >= 1, unit | batch_size, heterogeneity >= 0"
        )
    rng = random.Random(seed if seed >= 0 else str(seed))  # Random(-s) is Random(s)
    base, per_sample = rng.uniform(0.5, 2.0), rng.uniform(0.02, 0.1)
    ratio, knee, tail = rng.uniform(1.5, 2.5), rng.uniform(0.05, 0.3), rng.uniform(0.1, 1.0)
    latency, link_per_sample = rng.uniform(0.02, 0.2), rng.uniform(0.001, 0.01)
    sizes = measurement_sizes(unit, batch_size)
    wobble = {d: [1 + rng.gauss(0, WOBBLE) for _ in sizes] for d in ("forward", "backward")}

    def vary() -> float:
        return math.exp(heterogeneity * rng.gauss(0, 1))

    stage_list = []
    for s in range(stages):
        f_base, f_per, r = base * vary(), per_sample * vary(), ratio * vary()
        units = round(knee * vary() * batch_size / unit)
        k = min(max(units, 1) * unit, batch_size)
        stage_list.append(
            {
                "name": f"s{s}",
                "forward": _curve(shape, f_base, f_per, k, sizes, wobble["forward"]),
                "backward": _curve(shape, f_base * r, f_per * r, k, sizes, wobble["backward"]),
                "tail": rounded(tail * vary()),
            }
        )
    links = []
    for _ in range(stages - 1):
        affine = {
            "base": rounded(latency * vary()),
            "per_sample": rounded(link_per_sample * vary()),
        }
        cost = {"affine": affine}
        links.append({"forward": cost, "backward": cost})
    return {
        "format": "tidgap.problem/1",
        "name": name or f"synth-{seed}",
        "batch_size": batch_size,
        "unit": unit,
        "time_unit": "ms",
        "stages": stage_list,
        "links": links,
        "source": {
            "description": f"Simulated network, {stages} stages, batch {batch_size}, unit "
            f"{unit}, {shape} costs, heterogeneity {heterogeneity:g}, seed {seed}; synthetic",
            "generated_by": "tidgap synth",
            "command": shlex.join(
                ["tidgap", "synth", "--seed", str(seed), "--stages", str(stages)]
                + ["--batch-size", str(batch_size), "--unit", str(unit)]
                + ["--heterogeneity", repr(heterogeneity), "--shape", shape]
                + (["--name", name] if name else [])
            ),
            "seed": seed,
            "shape": shape,
            "heterogeneity": heterogeneity,
            "derivation": DERIVATION,
        },
    }
