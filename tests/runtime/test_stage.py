"""TorchStage through the in-process fakes: every kind of plan gives a single process's
gradients (flush, 1F1B, ordered; aligned and recompute; chunks straddling across stages)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch)")

from torch import nn  # noqa: E402

from tests.support.runtime_fakes import run_ranks  # noqa: E402
from tidgap import Problem  # noqa: E402
from tidgap.model.plan import Plan, check_order  # noqa: E402
from tidgap.profiling.models import Model, gpt  # noqa: E402
from tidgap.profiling.run import stage_modules  # noqa: E402
from tidgap.profiling.synth import synth_problem  # noqa: E402
from tidgap.runtime.failures import ProbeFailed  # noqa: E402
from tidgap.runtime.lowering import lower, recomputes  # noqa: E402
from tidgap.runtime.reference import (  # noqa: E402
    NOISE_FLOOR,
    batch_statistics,
    max_relative_difference,
    reference_gradients,
    stage_gradients,
)
from tidgap.runtime.stage import (  # noqa: E402
    Chunks,
    HeldBytes,
    TorchStage,
    boundary_specs,
    stage_of,
)
from tidgap.runtime.task import Task, make_task  # noqa: E402
from tidgap.schedules.families import SCHEDULES  # noqa: E402
from tidgap.schedules.ir import repair, window_order  # noqa: E402

B = 8
TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-4}


def mlp(dtype: torch.dtype) -> Model:
    """Seven layers on ``(b, 4)`` floats (a ``module:attribute`` model: mean-square loss)."""
    torch.manual_seed(0)
    layers = nn.Sequential(
        nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 6), nn.Tanh()
    )
    layers.append(nn.Linear(6, 3))
    layers.to(dtype)
    return Model("tests:mlp", layers, lambda b, device: torch.randn(b, 4), {"input_shape": [4]})


def tiny_gpt(dtype: torch.dtype) -> Model:
    """embed, block0, block1, head; eval mode (no dropout)."""
    torch.manual_seed(0)
    model = gpt(layers=2, hidden=16, heads=2, seq_len=8, vocab=50)
    model.layers.to(dtype).eval()
    return model


def ordered(forward: list[list[int]], backward: list[list[int]], window: int) -> Plan:
    """An ordered plan: the order ``window`` samples per stage stand for, made valid."""
    windows = [window] * len(forward)
    order = repair(window_order(forward, backward, windows), forward, backward)
    plan = Plan.of(forward, backward, order=list(order.stages))
    check_order(plan, len(forward))
    return plan


def one_f_one_b(stages: int, m: int) -> Plan:
    problem = Problem.from_dict(synth_problem(0, stages, B))
    return SCHEDULES["1f1b"].baseline(problem, m)


def pipelined(model: Model, boundaries: list[int], plan: Plan, task: Task) -> TorchStage:
    """One pipelined iteration of ``plan`` over the fake network; the last stage (the
    gradients are left in the model's parameters)."""
    modules = [module for _, _, module in stage_modules(model, boundaries)]
    specs = boundary_specs(modules, task.inputs[:1])
    flags = recomputes(plan)
    stages = [stage_of(modules, r, task, flags[r], specs) for r in range(len(modules))]
    model.layers.zero_grad(set_to_none=True)
    run_ranks(lower(plan), lambda r: stages[r], timeout=10.0)
    return stages[-1]


def gathered(model: Model, boundaries: list[int]) -> dict[str, torch.Tensor]:
    """Every stage's gradients, merged."""
    gradients: dict[str, torch.Tensor] = {}
    for _, names, _ in stage_modules(model, boundaries):
        gradients.update(stage_gradients(model.layers, names))
    return gradients


def check(model: Model, boundaries: list[int], plan: Plan, dtype: torch.dtype) -> None:
    """The plan's gradients and loss equal the single-process ones."""
    task = make_task(model, B, seed=1, device=torch.device("cpu"), dtype=dtype)
    want = reference_gradients(model.layers, task)
    last = pipelined(model, boundaries, plan, task)
    assert max_relative_difference(gathered(model, boundaries), want) < TOLERANCE[dtype]
    with torch.no_grad():
        loss = task.batch_loss(model.layers(task.inputs))
    assert last.loss is not None
    assert torch.allclose(last.loss, loss, rtol=TOLERANCE[dtype], atol=0)


# Stage 1's forward (2, 6) is cut from stage 0's chunks (0, 3) and (3, 8); stage 0's
# backward (3, 8) from stage 1's gradient chunks (0, 6) and (6, 8).
FLUSH = Plan.of([[3, 5], [2, 4, 2], [8]], [[3, 5], [6, 2], [8]])
# Forward and backward partitions differ, every backward boundary a forward boundary.
ALIGNED = ordered([[2, 2, 4], [1, 3, 4], [4, 2, 2]], [[4, 4], [4, 4], [4, 4]], window=4)
# Stages 0 and 1 recompute: backward boundaries 2 and 3 are not forward boundaries.
RECOMPUTE_FORWARD = [[4, 4], [8], [2, 6]]
RECOMPUTE_BACKWARD = [[2, 6], [3, 5], [2, 6]]
RECOMPUTE_FLUSH = Plan.of(RECOMPUTE_FORWARD, RECOMPUTE_BACKWARD)
RECOMPUTE_ORDERED = ordered(RECOMPUTE_FORWARD, RECOMPUTE_BACKWARD, window=4)

MLP_CASES = {
    "flush-unequal": ([2, 5], FLUSH),
    "1f1b-4-stages-m4": ([1, 3, 5], one_f_one_b(4, 4)),
    "1f1b-4-stages-m3-uneven": ([1, 3, 5], one_f_one_b(4, 3)),
    "1f1b-2-stages-m8": ([3], one_f_one_b(2, 8)),
    "ordered-aligned": ([2, 5], ALIGNED),
    "recompute-flush": ([2, 5], RECOMPUTE_FLUSH),
    "recompute-ordered": ([2, 5], RECOMPUTE_ORDERED),
}


def test_the_plans_are_what_the_cases_say() -> None:
    assert recomputes(FLUSH) == recomputes(ALIGNED) == [False] * 3
    assert recomputes(RECOMPUTE_FLUSH) == [True, True, False]
    steps = [[(step.kind, step.samples) for step in rank] for rank in lower(FLUSH)]
    assert steps[1][3:5] == [("recv_forward", (3, 8)), ("forward", (2, 6))]  # straddles
    assert steps[0][-2:] == [("recv_backward", (6, 8)), ("backward", (3, 8))]  # straddles
    for plan in (ALIGNED, RECOMPUTE_ORDERED):
        assert plan.order is not None
        assert any("BF" in letters for letters in plan.order)  # not a flush order


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("case", MLP_CASES, ids=list(MLP_CASES))
def test_mlp_plans_match_one_process(case: str, dtype: torch.dtype) -> None:
    boundaries, plan = MLP_CASES[case]
    check(mlp(dtype), boundaries, plan, dtype)


GPT_CASES = {
    "1f1b-2-stages": ([2], one_f_one_b(2, 4)),
    "flush-unequal-3-stages": ([1, 3], FLUSH),
    "recompute-ordered-3-stages": ([1, 3], RECOMPUTE_ORDERED),
}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("case", GPT_CASES, ids=list(GPT_CASES))
def test_gpt_plans_match_one_process(case: str, dtype: torch.dtype) -> None:
    boundaries, plan = GPT_CASES[case]
    check(tiny_gpt(dtype), boundaries, plan, dtype)


def test_a_reset_stage_runs_the_next_iteration_alike() -> None:
    model = mlp(torch.float64)
    task = make_task(model, B, seed=2, device=torch.device("cpu"), dtype=torch.float64)
    modules = [module for _, _, module in stage_modules(model, [2, 5])]
    specs = boundary_specs(modules, task.inputs[:1])
    flags = recomputes(RECOMPUTE_ORDERED)
    stages = [stage_of(modules, r, task, flags[r], specs) for r in range(3)]
    results = []
    for _ in range(2):
        model.layers.zero_grad(set_to_none=True)
        for stage in stages:
            stage.reset()
        run_ranks(lower(RECOMPUTE_ORDERED), lambda r: stages[r])
        results.append(gathered(model, [2, 5]))
    assert max_relative_difference(results[1], results[0]) == 0.0


def test_a_stage_that_does_not_recompute_refuses_a_misaligned_backward() -> None:
    model = mlp(torch.float64)
    task = make_task(model, B, seed=1, device=torch.device("cpu"), dtype=torch.float64)
    options = {"first": True, "last": True, "task": task, "input_spec": None}
    stage = TorchStage(model.layers, recompute=False, output_spec=None, **options)
    stage.forward((0, 4))
    stage.forward((4, 8))
    with pytest.raises(RuntimeError, match="forward boundaries"):
        stage.backward((0, 2))


def test_chunks_cut_across_pieces_and_name_what_is_missing() -> None:
    chunks = Chunks()
    chunks.add((0, 3), torch.arange(3))
    chunks.add((3, 8), torch.arange(3, 8))
    assert chunks.cut((2, 6), "forward").tolist() == [2, 3, 4, 5]
    chunks.drop_through(3)
    assert chunks.cut((3, 5), "forward").tolist() == [3, 4]
    with pytest.raises(RuntimeError, match=r"forward of samples \(2, 4\): samples 2"):
        chunks.cut((2, 4), "forward")
    with pytest.raises(RuntimeError, match="samples 8"):
        chunks.cut((6, 9), "backward")


def test_boundary_specs_and_chunk_specs() -> None:
    model = tiny_gpt(torch.float32)
    task = make_task(model, B, seed=0, device=torch.device("cpu"), dtype=torch.float32)
    modules = [module for _, _, module in stage_modules(model, [1, 3])]
    specs = boundary_specs(modules, task.inputs[:1])
    assert specs == [((8, 16), torch.float32), ((8, 16), torch.float32), ((8, 50), torch.float32)]
    stage = stage_of(modules, 1, task, False, specs)
    assert stage.input_spec((2, 5)) == ((3, 8, 16), torch.float32)
    assert stage.gradient_spec((0, 8)) == ((8, 8, 16), torch.float32)


def test_boundary_specs_probe_in_eval_mode_and_restore_the_mode() -> None:
    stages = [nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6)), nn.Sequential(nn.Dropout())]
    stages[1].eval()
    specs = boundary_specs(stages, torch.randn(1, 4))  # batch norm in train mode refuses 1
    assert specs == [((6,), torch.float32), ((6,), torch.float32)]
    assert stages[0].training and stages[0][1].training and not stages[1].training


class _Pair(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, x


class _Nothing(nn.Module):
    def forward(self, x: torch.Tensor) -> None:
        return None


class _BatchSum(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(0, keepdim=True)


@pytest.mark.parametrize(
    ("last", "message"),
    [
        (_Pair(), "its last layer '_Pair' returned a tuple, not one tensor"),
        (_Nothing(), "its last layer '_Nothing' returned a NoneType, not one tensor"),
        (
            _BatchSum(),
            "its last layer '_BatchSum' returned shape (1, 6), whose first dimension is not "
            "the microbatch size 2",
        ),
    ],
)
def test_a_stage_that_does_not_send_one_batched_tensor_fails_the_probe(
    last: nn.Module, message: str
) -> None:
    """A stage whose output is not one tensor of its samples (a tuple, ``None``, a sum over
    the batch) fails the probe as a layer's error does (one line naming the stage), not with
    an ``AttributeError`` out of the probe itself."""
    stages = [nn.Sequential(nn.Linear(4, 6), last), nn.Sequential(nn.Linear(6, 2))]
    with pytest.raises(ProbeFailed) as failed:
        boundary_specs(stages, torch.randn(2, 4))
    assert failed.value.stage == 0
    assert str(failed.value.__cause__) == message


def test_batch_norm_without_running_statistics_is_said_to_defeat_eval_mode() -> None:
    """Eval mode is the gradient check's answer to batch norm, but one that keeps no
    running statistics normalises by the batch in eval mode too: the reason says so (the
    check then fails, exit 1, the truth about such a model), not that eval mode helps."""
    tracked = nn.Sequential(nn.Linear(4, 6), nn.Sequential(nn.BatchNorm1d(6)))
    untracked = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6, track_running_stats=False))
    assert batch_statistics(nn.Sequential(nn.Linear(4, 6))) is None
    assert batch_statistics(tracked) == (
        "layer 1.0 (BatchNorm1d) normalises each microbatch by its own statistics in train mode"
    )
    assert batch_statistics(untracked) == (
        "layer 1 (BatchNorm1d) normalises each microbatch by its own statistics in train "
        "mode, and in eval mode too (it keeps no running statistics), so no forward of the "
        "whole batch computes what the pipeline does"
    )
    both = nn.Sequential(nn.BatchNorm1d(4), untracked)  # the untracked one, though later
    assert batch_statistics(both).startswith("layer 1.1 (BatchNorm1d) ")
    assert "in eval mode too" in batch_statistics(both)


def test_tasks_are_deterministic_from_the_seed() -> None:
    model = tiny_gpt(torch.float32)
    cpu = torch.device("cpu")
    a, b = (make_task(model, 4, 7, cpu, torch.float32) for _ in range(2))
    c = make_task(model, 4, 8, cpu, torch.float32)
    assert a.inputs.shape == a.targets.shape == (4, 8)
    assert a.inputs.dtype == torch.int64 and int(a.inputs.max()) < 50
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    assert not torch.equal(a.inputs, c.inputs)
    vgg = Model("vgg16", nn.Sequential(), lambda b, d: None, {"image_size": 32, "classes": 10})
    images = make_task(vgg, 3, 7, cpu, torch.float64)
    assert images.inputs.shape == (3, 3, 32, 32) and images.inputs.dtype == torch.float64
    assert images.targets.shape == (3,) and int(images.targets.max()) < 10
    floats = make_task(mlp(torch.float32), 3, 7, cpu, torch.float32)
    assert floats.inputs.shape == (3, 4) and floats.targets.shape == (3, 0)


def test_per_sample_losses() -> None:
    outputs = torch.tensor([[1.0, 3.0], [2.0, 0.0]])
    task = make_task(mlp(torch.float32), 2, 0, torch.device("cpu"), torch.float32)
    assert task.loss(outputs, task.targets).tolist() == [5.0, 2.0]
    logits = torch.zeros(2, 3, 5)  # uniform: every position costs log 5
    tokens = torch.zeros(2, 3, dtype=torch.int64)
    gpt_task = make_task(tiny_gpt(torch.float32), 2, 0, torch.device("cpu"), torch.float32)
    assert torch.allclose(gpt_task.loss(logits, tokens), torch.log(torch.tensor([5.0, 5.0])))


def test_max_relative_difference() -> None:
    want = {"a": torch.tensor([1.0, -4.0]), "b": torch.zeros(3), "c": torch.zeros(0)}
    got = {"a": torch.tensor([1.0, -4.2]), "b": torch.zeros(3), "c": torch.zeros(0)}
    assert max_relative_difference(got, want) == pytest.approx(0.05)
    got["b"] = torch.tensor([0.0, 1e-30, 0.0])  # against zeros: rounding noise
    assert max_relative_difference(got, want) == pytest.approx(0.05)
    got["b"] = torch.tensor([0.0, 1e-3, 0.0])  # against zeros: relative to the floor (of 4)
    assert max_relative_difference(got, want) == pytest.approx(1e-3 / (NOISE_FLOOR * 4))
    # a tensor of small gradients is compared with its own size above the floor
    small = {"a": torch.tensor([1.0]), "b": torch.tensor([0.01])}
    assert max_relative_difference({**small, "b": torch.tensor([0.0101])}, small) == (
        pytest.approx(0.01, rel=1e-4)
    )
    # rounding noise where the true gradient is zero: a bias a normalisation cancels (a
    # relative difference of 0.22 before the floor, though the run was right)
    cancelled = {"weight": torch.tensor([0.3, -0.2]), "bias": torch.tensor([1.3e-9])}
    noisy = {"weight": torch.tensor([0.3, -0.2]), "bias": torch.tensor([1.0e-9])}
    assert max_relative_difference(noisy, cancelled) < 1e-4
    only_zeros = {"b": torch.zeros(2)}  # every reference zero: against tiny
    assert max_relative_difference({"b": torch.tensor([0.0, 1e-30])}, only_zeros) > 1e6
    with pytest.raises(KeyError, match="missing \\['c'\\]"):
        max_relative_difference({"a": got["a"], "b": got["b"]}, want)
    with pytest.raises(ValueError, match="shape"):
        max_relative_difference({**want, "a": torch.zeros(3)}, want)
    nan = torch.tensor([1.0, float("nan")])  # NaN matches nothing, not even NaN
    assert max_relative_difference({**want, "a": nan}, {**want, "a": nan}) == float("inf")
    assert max_relative_difference(want, {**want, "a": torch.tensor([1.0, float("inf")])}) == float(
        "inf"
    )


def test_stage_gradients_key_parameters_as_the_whole_model() -> None:
    model = tiny_gpt(torch.float32)
    parts = stage_modules(model, [1, 3])
    keys = [set(stage_gradients(model.layers, names)) for _, names, _ in parts]
    assert set().union(*keys) == {key for key, _ in model.layers.named_parameters()}
    assert all(key.startswith("embed.") for key in keys[0])
    assert all(
        torch.count_nonzero(g) == 0 for g in stage_gradients(model.layers, ["head"]).values()
    )


class _Transposed(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.transpose(1, 2)


def test_only_a_stage_receives_its_input_contiguous() -> None:
    """A stage's input comes from the transport, contiguous; a layer inside a stage takes
    its predecessor's view as it is (timed on a copy, the layer's own copy dropped out of
    the costs the split balances)."""
    from tidgap.profiling.measure import stage_input

    view = torch.randn(2, 6, 8).transpose(1, 2)
    assert stage_input(view, False).is_contiguous()
    assert not stage_input(view, False, received=False).is_contiguous()
    assert stage_input(view, False, received=False).requires_grad
    assert not stage_input(view, True).requires_grad  # the model's input


def test_a_stage_fed_a_transposed_view_is_profiled_as_it_receives_it() -> None:
    """The transport sends a stage's output contiguous; the profile measured the next stage
    on the transposed view, whose first layer then made a contiguous copy it counted on top
    of the input it keeps (predicted 29% over what the run held)."""
    from tidgap.profiling.measure import graph_bytes_per_sample

    torch.manual_seed(0)
    layers = nn.Sequential(
        nn.Linear(8, 8), _Transposed(), nn.Linear(6, 6), nn.ReLU(), _Transposed(), nn.Linear(8, 4)
    )
    shape = {"input_shape": [6, 8]}
    model = Model("tests:transposed", layers, lambda b, device: torch.randn(b, 6, 8), shape)
    task = make_task(model, 8, 0, torch.device("cpu"), torch.float32)
    modules = [module for _, _, module in stage_modules(model, [2, 4])]
    stages = [
        stage_of(modules, r, task, False, boundary_specs(modules, task.inputs[:1]))
        for r in range(3)
    ]
    run_ranks(lower(Plan.of([[2] * 4] * 3, [[2] * 4] * 3)), lambda r: stages[r], timeout=10.0)
    with torch.no_grad():
        boundary = modules[0](task.inputs)
    assert not boundary.is_contiguous()
    assert stages[1].held.peak == 8 * graph_bytes_per_sample(modules[1], boundary, False, False)


class _Scaled(nn.Module):
    """``linear(x) * scale[0]``: autograd saves a row of ``scale``, a 16 KB buffer (its
    whole storage), or of a frozen parameter as large."""

    def __init__(self, as_buffer: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(16, 16)
        scale = torch.rand(256, 16)
        if as_buffer:
            self.register_buffer("scale", scale)
        else:
            self.scale = nn.Parameter(scale, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * self.scale[0]


def test_a_buffer_autograd_saves_is_the_stages_state_not_a_graphs() -> None:
    """A buffer is counted as a parameter is, once whatever the schedule (nowhere): the
    profile counted it in every forward's graph (``graph_bytes_per_chunk``: a plan of 4
    chunks was predicted 3 buffers over what the run held, 0.068 against 0.019 MB)."""
    from tidgap.profiling.measure import graph_growth

    x = torch.randn(8, 16)
    buffered, frozen = _Scaled(as_buffer=True), _Scaled(as_buffer=False)
    assert graph_growth(buffered, x, False, None) == graph_growth(frozen, x, False, None)
    peaks = []
    for module in (buffered, frozen):
        held = HeldBytes(module)
        with held.watching():
            y = module(x.clone().requires_grad_())
        held.sample([])
        peaks.append(held.peak)
        del y
    assert peaks[0] == peaks[1] > 0


class _Replacing(nn.Module):
    """A buffer replaced in every forward (an update that is not in place)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("ema", torch.zeros(4096))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.ema = self.ema + 1
        return torch.tanh(x)


def test_a_buffer_replaced_in_forward_lends_its_address_to_nothing_counted() -> None:
    """Storages are known by address: the old buffer, freed as the forward replaced it,
    lent its address to the output tanh saves, which the count then left out (a peak of 0
    where the stage held 16 KB). The state is kept alive while a forward is watched."""
    from tidgap.profiling.measure import graph_bytes_per_sample

    peaks = []
    for _ in range(4):  # the allocator reuses the address from the second module on
        module = _Replacing()
        held = HeldBytes(module)
        with held.watching():
            y = module(torch.randn(1, 4096, requires_grad=True))
        held.sample([])
        peaks.append(held.peak)
        counted = graph_bytes_per_sample(_Replacing(), torch.randn(1, 4096), True, False)
        assert counted >= 4096 * 4
        del y
    assert peaks == [4096 * 4] * 4


def test_held_bytes_follow_the_schedule_and_match_the_profile() -> None:
    """GPipe holds the whole batch's saved tensors on stage 0, exactly what the profile
    measures per sample times ``B``; 1F1B holds less on both stages."""
    from tidgap.profiling.measure import graph_bytes_per_sample

    model = mlp(torch.float32)
    task = make_task(model, 8, 0, torch.device("cpu"), torch.float32)

    def peaks(plan: Plan) -> list[int]:
        modules = [module for _, _, module in stage_modules(model, [2])]
        specs = boundary_specs(modules, task.inputs[:1])
        stages = [stage_of(modules, r, task, False, specs) for r in range(2)]
        run_ranks(lower(plan), lambda r: stages[r], timeout=10.0)
        return [stage.held.peak for stage in stages]

    gpipe = peaks(Plan.of([[2] * 4] * 2, [[2] * 4] * 2))
    first = stage_modules(model, [2])[0][2]
    assert gpipe[0] == 8 * graph_bytes_per_sample(first, task.inputs, True, False)
    interleaved = peaks(one_f_one_b(2, 4))
    assert interleaved[0] < gpipe[0] and interleaved[1] < gpipe[1]
