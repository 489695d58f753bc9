"""Hypothesis strategies: small feasible problems and plans (docs/model.md, Inputs and A plan)."""

from __future__ import annotations

from hypothesis import strategies as st

from tidgap import Link, Order, Plan, Problem, Stage, TimeFunction, affine, table
from tidgap.schedules.ir import repair

#: A duration: finite, non-negative, small enough that sums stay well inside float precision.
TIMES = st.floats(min_value=0.0, max_value=10.0, allow_subnormal=False)


@st.composite
def time_functions(draw: st.DrawFn, unit: int, largest: int) -> TimeFunction:
    """An affine function, or a table whose sizes cover ``unit..largest`` (sometimes more).

    Table times are arbitrary or sorted (non-decreasing), and the points need not be
    multiples of ``unit``, so evaluation interpolates.
    """
    if draw(st.booleans()):
        return affine(draw(TIMES), draw(TIMES))
    low = draw(st.integers(1, unit))
    high = draw(st.integers(largest, largest + unit))
    inner = draw(st.sets(st.integers(low, high), max_size=4))
    sizes = sorted({low, high, *inner})
    times = draw(st.lists(TIMES, min_size=len(sizes), max_size=len(sizes)))
    if draw(st.booleans()):
        times.sort()
    return table(sizes, times)


@st.composite
def problems(
    draw: st.DrawFn, min_stages: int = 1, max_stages: int = 4, binding_caps: bool = True
) -> Problem:
    """A valid problem: ``S`` stages, ``unit`` in 1..3, ``U`` in 1..8, optional caps and tails.

    Caps are multiples of ``unit``, some above the batch size; with ``binding_caps=False``
    none is below it, so every microbatch count ``1..U`` is feasible.
    """
    num_stages = draw(st.integers(min_stages, max_stages))
    unit = draw(st.integers(1, 3))
    num_units = draw(st.integers(1, 8))
    batch = unit * num_units
    cap_units = st.integers(1 if binding_caps else num_units, num_units + 1)
    caps = st.none() | cap_units.map(lambda k: k * unit)
    raw_caps = [(draw(caps), draw(caps)) for _ in range(num_stages)]
    forward_caps = [batch if f is None else min(f, batch) for f, _ in raw_caps]
    backward_caps = [
        fcap if b is None else min(b, batch)
        for fcap, (_, b) in zip(forward_caps, raw_caps, strict=True)
    ]
    stages = [
        Stage(
            forward=draw(time_functions(unit, forward_caps[s])),
            backward=draw(time_functions(unit, backward_caps[s])),
            max_microbatch=raw_caps[s][0],
            max_microbatch_backward=raw_caps[s][1],
            tail=draw(st.just(0.0) | TIMES),
        )
        for s in range(num_stages)
    ]
    links = [
        Link(
            forward=draw(time_functions(unit, forward_caps[s])),
            backward=draw(time_functions(unit, backward_caps[s + 1])),
        )
        for s in range(num_stages - 1)
    ]
    return Problem(batch_size=batch, unit=unit, stages=stages, links=links)


@st.composite
def partitions(draw: st.DrawFn, total: int, largest: int) -> list[int]:
    """An ordered partition of ``total`` into positive parts of at most ``largest``."""
    parts: list[int] = []
    while total:
        part = draw(st.integers(1, min(largest, total)))
        parts.append(part)
        total -= part
    return parts


@st.composite
def plans(draw: st.DrawFn, problem: Problem) -> Plan:
    """A feasible plan: per stage and direction, an independent partition within the cap."""
    unit, num_units = problem.unit, problem.num_units

    def sizes(cap: int) -> list[int]:
        return [part * unit for part in draw(partitions(num_units, cap // unit))]

    stages = range(problem.num_stages)
    return Plan.of(
        [sizes(problem.forward_cap(s)) for s in stages],
        [sizes(problem.backward_cap(s)) for s in stages],
    )


@st.composite
def raised(draw: st.DrawFn, problem: Problem) -> Problem:
    """``problem`` with one time function, link time or tail raised by a non-negative amount.

    An affine function gets a larger base or per-sample time; a table gets a larger time at
    a non-empty subset of its points, which raises the interpolated function everywhere.
    """
    data = problem.model_dump(exclude_none=True)
    stages, links = range(problem.num_stages), range(problem.num_stages - 1)
    targets = [("stages", s, key) for s in stages for key in ("forward", "backward", "tail")]
    targets += [("links", s, key) for s in links for key in ("forward", "backward")]
    group, index, key = draw(st.sampled_from(targets))
    delta = draw(TIMES)
    owner = data[group][index]
    if key == "tail":
        owner["tail"] += delta
    elif "affine" in owner[key]:
        owner[key]["affine"][draw(st.sampled_from(["base", "per_sample"]))] += delta
    else:
        times = owner[key]["table"]["times"]
        for i in draw(st.sets(st.integers(0, len(times) - 1), min_size=1)):
            times[i] += delta
    return Problem.from_dict(data)


@st.composite
def orders(draw: st.DrawFn, plan: Plan) -> Order:
    """Any order with the plan's counts (rule ``count`` holds; rules 1 and 2 may break): per
    stage, a random interleaving of ``M_s`` ``F``s and ``N_s`` ``B``s."""
    letters = []
    for forward, backward in zip(plan.forward, plan.backward, strict=True):
        ops = ["F"] * len(forward) + ["B"] * len(backward)
        letters.append("".join(draw(st.permutations(ops))))
    return Order.of(letters)


@st.composite
def ordered_plans(draw: st.DrawFn, problem: Problem) -> Plan:
    """A feasible ordered plan: a random plan and a random order, repaired to validity."""
    plan = draw(plans(problem))
    order = repair(draw(orders(plan)), plan.forward, plan.backward)
    return Plan.of(plan.forward, plan.backward, order=list(order.stages))
