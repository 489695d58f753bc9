"""``tidgap run --results`` reads rank files it did not write: each is checked field by
field, so a damaged, foreign or swapped file is one :class:`InputError` naming the file and
the field, never a ``KeyError`` or ``TypeError`` later."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
LEAF = torch.utils._pytree.tree_flatten(torch.ones(1))[1]

from tidgap.model.errors import InputError  # noqa: E402
from tidgap.runtime.draws import Draw, as_saved  # noqa: E402
from tidgap.runtime.job import Job  # noqa: E402
from tidgap.runtime.report import load_results  # noqa: E402
from tidgap.runtime.results_check import check_result  # noqa: E402
from tidgap.runtime.worker import result_path  # noqa: E402

#: The job of :func:`result`: two timed iterations.
JOB = Job("p.json", "plan.json", "gpt", [1], "results", {}, iterations=2)


def result(rank: int) -> dict[str, Any]:
    """A rank's result as a worker writes it: two timed iterations of one microbatch."""
    rows = [("forward", 0, 0, 4, 0.0, 0.5), ("backward", 0, 0, 4, 0.6, 1.0)]
    return {
        "job": dataclasses.asdict(JOB),
        "rank": rank,
        "stage": f"s{rank}",
        "layers": ["0", "1"],
        "threads": 1,
        "recompute": False,
        "iterations": [list(rows), list(rows)],
        "starts": [0.0, 1.5],
        "peak_bytes": [64, 64],
        "gradients": {"0.weight": torch.zeros(2)},
        "weights": None,
        "stepped": None,
    }


def changed(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda r: r.update(fields)


#: A saved dropout mask (:func:`tidgap.runtime.draws.as_saved`).
MASK = as_saved([Draw("nn.Dropout mask", [torch.ones(4, 2, dtype=torch.bool)], LEAF)])[0]


def train_draws(*draws: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """A train-mode check's result holding ``draws``."""
    return changed(checked_in="train", draws=list(draws))


def row(change: tuple[Any, ...]) -> Callable[[dict[str, Any]], None]:
    def apply(r: dict[str, Any]) -> None:
        r["iterations"][1][1] = change

    return apply


def test_a_workers_result_passes() -> None:
    check_result(result(1), 1)
    train_draws(MASK)(checked := result(1))
    check_result(checked, 1)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda r: r.pop("iterations"), "iterations: is missing"),
        (changed(rank=0), "rank: is 0: not rank 1's file"),
        (changed(redrawn=5), "redrawn: is not a reason or null"),
        (changed(job=[1]), "job: is not an object"),
        (changed(rank=torch.tensor([1, 1])), "rank: is tensor([1, 1]): not rank 1's file"),
        (lambda r: r["job"].pop("plan"), "job.plan: is missing"),
        (lambda r: r["job"].update(seed=torch.tensor(1)), "job.seed: expected"),
        (lambda r: r["job"].update(alternates=5), "job.alternates: expected a list"),
        (changed(redrawn="made up"), "redrawn: is given for a stage that does not recompute"),
        (
            changed(iterations=[[("forward", 0, 0, 4, 0.0, 0.5)]]),
            "iterations: is not a list of the job's 2 iterations",
        ),
        (row((["forward"], 0, 0, 4, 0.0, 1.0)), "iterations[1][1]: has kind ['forward']"),
        (row(("forward", 0, 0, 4, -1.0, 0.5)), "iterations[1][1]: has times that are not 0 <="),
        (row(("forward", 0, 0, 4, 0.0, 1e300)), "iterations[1][1]: has times that are not 0 <="),
        (
            lambda r: r["iterations"].__setitem__(1, [("forward", 0, 0, 4, 0.0, 0.0)]),
            "iterations[1]: took no time",
        ),
        (changed(peak_bytes=[64, 10**400]), "peak_bytes: is not one byte count per iteration"),
        (changed(layers="0,1"), "layers: is not a list of layer names"),
        (changed(recompute=1), "recompute: is not true or false"),
        (changed(transport="tcp"), 'transport: is not "gloo", "nccl" or null'),
        (changed(iterations=[]), "iterations: is not a list of the job's 2 iterations"),
        (row(("forward", 0, 0, 4)), "iterations[1][1]: is not a record"),
        (row(("dance", 0, 0, 4, 0.0, 1.0)), "iterations[1][1]: has kind 'dance'"),
        (row(("forward", 0, 4, 0, 0.0, 1.0)), "iterations[1][1]: has a microbatch or samples"),
        (row(("forward", 0, 0, 4, 1.0, float("nan"))), "iterations[1][1]: has times"),
        (row(("forward", 0, 0, 4, 1.0, 0.5)), "iterations[1][1]: has times"),
        (changed(peak_bytes=[64]), "peak_bytes: is not one byte count per iteration"),
        (changed(starts=[0.5]), "starts: is not one finite start time per iteration"),
        (changed(plan=[[4], [4]]), "plan: is not an object"),
        (changed(starts=[0.5, float("inf")]), "starts: is not one finite start time"),
        (changed(gradients={"w": [1.0]}), "gradients: is not a mapping of parameter names"),
        (changed(gradients={"w": torch.zeros(2, dtype=torch.complex64)}), "gradients: is not"),
        (changed(gradients={"w": torch.zeros(2, device="meta")}), "gradients: is not a"),
        (changed(gradients={"w": torch.zeros(2).to_sparse()}), "gradients: is not a mapping"),
        (changed(gradients={"w": torch.zeros(2, dtype=torch.int64)}), "gradients: is not a"),
        (changed(weights={"w": torch.zeros(2, dtype=torch.complex64)}), "weights: is not a"),
        (changed(weights={"w": torch.zeros(2, dtype=torch.float64)}), "weights: is not a"),
        (
            train_draws({**MASK, "tensors": [torch.ones(4, 2, dtype=torch.float64)]}),
            "draws[0]: is not a random draw",
        ),
        (changed(checked_in="dream"), 'checked_in: is not "train", "eval" or null'),
        (changed(eval_reason=3), "eval_reason: is not a reason or null"),
        (changed(checked_in="eval", draws=[]), "draws: is given for a check not in train"),
        (changed(checked_in="train"), "draws: is missing for a train-mode check"),
        (train_draws({"name": "mask", "tensors": [1]}), "draws[0]: is not a random draw"),
        (changed(checked_in="train", draws=(MASK,)), "draws: is not a list of draws"),
        (
            train_draws({**MASK, "tensors": [torch.ones(4, 2, device="meta")]}),
            "draws[0]: is not a random draw",
        ),
        (train_draws({**MASK, "structure": "[1, {"}), "draws[0].structure: is not a tensor"),
        (
            train_draws({**MASK, "tensors": []}),  # more may follow: what it wrote into args
            "draws[0].structure: has 1 leaves for 0 tensors",
        ),
    ],
)
def test_a_damaged_result_names_the_field(
    damage: Callable[[dict[str, Any]], None], message: str
) -> None:
    damaged = copy.deepcopy(result(1))
    damage(damaged)
    with pytest.raises(InputError) as caught:
        check_result(damaged, 1)
    assert str(caught.value).startswith(message), str(caught.value)


def test_not_a_dict_is_refused() -> None:
    with pytest.raises(InputError, match="holds a list, not a rank's result"):
        check_result([1, 2], 0)


def test_swapped_rank_files_are_refused_naming_the_file(tmp_path: Path) -> None:
    torch.save(result(1), result_path(tmp_path, 0))
    torch.save(result(0), result_path(tmp_path, 1))
    with pytest.raises(InputError) as caught:
        load_results(tmp_path, 2)
    assert str(caught.value) == f"{result_path(tmp_path, 0)}: rank: is 1: not rank 0's file"


def test_a_file_torch_cannot_load_is_refused_saying_so(tmp_path: Path) -> None:
    result_path(tmp_path, 0).write_text("junk\n")
    with pytest.raises(InputError) as caught:
        load_results(tmp_path, 1)
    message = str(caught.value)
    assert message.startswith(f"{result_path(tmp_path, 0)}: cannot read rank 0's result (not")
    assert "not a file torch.load reads" in message
    assert "weights_only" not in message  # torch's advice to load it unsafely is left out
    result_path(tmp_path, 0).write_bytes(b"garbage" * 10)
    with pytest.raises(InputError, match=r"torch.load reads: Unsupported operand 103\)$"):
        load_results(tmp_path, 1)


def test_ranks_that_ran_other_jobs_are_refused_naming_the_file(tmp_path: Path) -> None:
    """A rank that timed fewer iterations than its job says, or a foreign job, is refused
    in its own file."""
    short = result(1)
    short.update(iterations=short["iterations"][:1], peak_bytes=[64], starts=[0.0])
    torch.save(result(0), result_path(tmp_path, 0))
    torch.save(short, result_path(tmp_path, 1))
    with pytest.raises(InputError) as caught:
        load_results(tmp_path, 2)
    assert str(caught.value) == (
        f"{result_path(tmp_path, 1)}: iterations: is not a list of the job's 2 iterations"
    )
    torch.save(result(1), result_path(tmp_path, 1))
    assert [r["rank"] for r in load_results(tmp_path, 2)] == [0, 1]


def test_ranks_that_sent_over_different_transports_are_refused(tmp_path: Path) -> None:
    torch.save(result(0) | {"transport": "nccl"}, result_path(tmp_path, 0))
    torch.save(result(1) | {"transport": "gloo"}, result_path(tmp_path, 1))
    with pytest.raises(InputError, match=r"over different transports \['gloo', 'nccl'\]"):
        load_results(tmp_path, 2)


def test_ranks_checked_in_different_modes_are_refused(tmp_path: Path) -> None:
    """Rank 0 checked in train mode with its draws, rank 1 in eval mode: no reference can
    replay both, so the folder is refused; saved draws load back (``weights_only``)."""
    trained, plain = result(0), result(1)
    train_draws(MASK)(trained)
    plain.update(checked_in="eval")
    torch.save(trained, result_path(tmp_path, 0))
    torch.save(plain, result_path(tmp_path, 1))
    with pytest.raises(InputError, match=r"different modes \['eval', 'train'\]"):
        load_results(tmp_path, 2)
    train_draws(MASK)(both := result(1))
    torch.save(both, result_path(tmp_path, 1))
    loaded = load_results(tmp_path, 2)
    assert torch.equal(loaded[1]["draws"][0]["tensors"][0], MASK["tensors"][0])
