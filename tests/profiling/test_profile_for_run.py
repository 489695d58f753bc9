"""``tidgap profile --recompute``: each backward time includes the forward of the same
samples, so a plan that recomputes is predicted with what ``tidgap run`` does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.profiling.test_profile import MLP, run


@pytest.fixture
def fixed_timings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every module measures ``size`` ms forward and ``2 * size + 1`` ms backward."""
    pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch)")
    from tidgap.profiling import run as profiling
    from tidgap.profiling.measure import Measurement

    def measure(modules: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        return [
            [Measurement(float(x.shape[0]), 2.0 * x.shape[0] + 1, 4) for _ in modules]
            for x in inputs
        ]

    monkeypatch.setattr(profiling, "measure", measure)


@pytest.mark.parametrize("recompute", [False, True])
def test_backward_tables_add_the_forward_with_recompute(
    fixed_timings: None, tmp_path: Path, recompute: bool
) -> None:
    out = tmp_path / "p.json"
    flags = ["--recompute"] if recompute else []
    args = [*MLP, "--stages", "2", "--batch-size", "8", "--split", "3", "--out", str(out)]
    result = run("profile", *args, *flags, "-q")
    assert result.exit_code == 0, result.stderr
    document = json.loads(out.read_text())
    for stage in document["stages"]:
        sizes, forward = stage["forward"]["table"]["sizes"], stage["forward"]["table"]["times"]
        backward = stage["backward"]["table"]["times"]
        assert forward == [float(b) for b in sizes]
        assert backward == [(3.0 if recompute else 2.0) * b + 1 for b in sizes]
    assert document["source"]["timing"]["recompute"] is recompute
    assert ("recomputed" in document["source"]["timing"]["backward"]) is recompute


def test_the_last_stage_is_timed_with_the_runs_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    """The module timed for the last stage returns the per-sample loss ``tidgap run``
    computes there (model.md's loss per chunk before its 1/B scale)."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch)")
    from tidgap.profiling import models
    from tidgap.profiling import run as profiling
    from tidgap.runtime.task import make_task

    timed: list[Any] = []

    def measure(modules: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        timed.extend(modules)
        return []

    monkeypatch.setattr(profiling, "measure", measure)
    model = models.gpt(layers=2, hidden=16, heads=2, seq_len=8, vocab=50)
    model.layers.eval()
    settings = profiling.Settings(
        "t", 2, 4, 1, 4, None, "cpu", 1, 0, None, 10.0, 0.05
    )  # fmt: skip
    split = ([2], {"method": "given by --split"})
    profiling.measure_stages(model, settings, split, torch.device("cpu"), [1, 2, 4], print)
    (_, first), (_, last) = timed
    assert isinstance(last, profiling.WithLoss) and not isinstance(first, profiling.WithLoss)
    task = make_task(model, 4, 0, torch.device("cpu"), torch.float32)
    x = first(task.inputs[:3])
    with torch.no_grad():
        want = task.loss(last.stage(x), task.targets[:3])
        assert torch.equal(last(x), want) and want.shape == (3,)


def test_graph_bytes_count_each_storage_once_and_leave_parameters_out() -> None:
    """What a stored graph holds: ``x * x`` saves ``x`` twice (one storage) and makes ``y``;
    a Linear saves its input, not its weight, and its output is held; Tanh saves its output
    (the graph's, one storage). The first stage's input is the task's; the last stage's
    output a loss."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch)")
    from torch import nn

    from tidgap.profiling.measure import graph_bytes_per_sample

    class Square(nn.Module):
        def forward(self, x: Any) -> Any:
            return x * x

    x = torch.randn(5, 12)
    assert graph_bytes_per_sample(Square(), x, first=False, last=False) == 24 * 4
    assert graph_bytes_per_sample(nn.Linear(12, 300), x, first=False, last=False) == 312 * 4
    # the last stage keeps the chunk's loss, a scalar: 4 bytes over 5 samples, rounded up
    assert graph_bytes_per_sample(nn.Linear(12, 300), x, first=False, last=True) == 12 * 4 + 1
    assert graph_bytes_per_sample(nn.Linear(12, 300), x, first=True, last=False) == 312 * 4
    tanh = nn.Sequential(nn.Linear(12, 3), nn.Tanh())
    assert graph_bytes_per_sample(tanh, x, first=False, last=False) == 15 * 4
    assert graph_bytes_per_sample(nn.Tanh(), x, first=True, last=False) == 12 * 4


def test_the_counts_free_the_graphs_they_measure() -> None:
    """A counted forward's graph is freed with its output: Tanh saves its output, which
    kept its own graph alive through the saved-tensor hook (a cycle through C++ that the
    collector cannot break), so every graph a profile measured stayed to its end."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch)")
    import gc

    from torch import nn

    from tidgap.profiling.measure import graph_bytes_per_sample, recompute_bytes_per_sample

    def tensors_alive() -> int:
        gc.collect()
        # by type (isinstance asks each object its __class__: a deprecated one warns)
        return sum(issubclass(type(o), torch.Tensor) for o in gc.get_objects())

    module, x = nn.Sequential(nn.Linear(12, 3), nn.Tanh()), torch.randn(5, 12)
    counts = []
    for _ in range(3):
        graph_bytes_per_sample(module, x, first=False, last=False)
        recompute_bytes_per_sample(module, x, False, None)
        counts.append(tensors_alive())
    assert counts[0] == counts[1] == counts[2], counts


@pytest.mark.parametrize("least", [1, 2, 3, 8])
def test_growth_fits_a_count_from_the_whole_and_the_first_unit(least: int) -> None:
    """``per_chunk + n * per_sample`` from ``n = least`` (the profile's unit) and ``n = b``:
    exact for a linear count, whichever unit; a count that fails is one line."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch)")
    from tidgap.model.errors import InputError
    from tidgap.profiling.measure import growth, probe_sizes

    seen: list[int] = []

    def count(x: Any) -> int:
        seen.append(x.shape[0])
        return 7 + 3 * x.shape[0]

    expected = (3, 7) if least < 8 else (-(-(7 + 24) // 8), 0)  # b <= least: per sample only
    assert growth(count, torch.zeros(8, 2), False, least) == expected
    assert seen == ([8, least, *probe_sizes(least, 8)] if least < 8 else [8])

    def fails(x: Any) -> int:
        if x.shape[0] == 1:
            raise ValueError("Expected more than 1 value per channel when training")
        return 10 * x.shape[0]

    assert growth(fails, torch.zeros(8, 2), True, 2) == (10, 0)
    with pytest.raises(InputError, match="forward of 1 sample holds failed: ValueError"):
        growth(fails, torch.zeros(8, 2), True, 1)


def test_a_batch_norm_model_profiles_at_a_unit_of_two(tmp_path: Path) -> None:
    """``BatchNorm1d`` fails on one sample in train mode: at ``--unit 2`` the memory figures
    come from two samples (a traceback before); at ``--unit 1`` the timing's one line."""
    pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch)")
    model = ("tests.runtime.pipeline_models:BATCH_NORM", "--input-shape", "6", "--stages", "2")
    fast = ("--batch-size", "4", "--repeats", "1", "--warmup", "0", "-q")
    two = run("profile", *model, *fast, "--unit", "2", "--out", str(tmp_path / "p.json"))
    assert two.exit_code == 0, two.stderr
    recorded = json.loads((tmp_path / "p.json").read_text())["source"]["batch_statistics"]
    assert recorded["layers"] == ["1 (BatchNorm1d)"]  # a search of it recomputes nowhere
    one = run("profile", *model, *fast, "--unit", "1", "--out", str(tmp_path / "q.json"))
    assert one.exit_code == 2 and one.stderr.count("\n") == 1, one.stderr
    assert "failed on 1 sample" in one.stderr
    assert "needs more than one: profile with --unit 2 or more" in one.stderr


def test_a_layer_failing_in_the_memory_forwards_names_its_stage(tmp_path: Path) -> None:
    """A layer that fails only in the forwards that measure what a stage holds (after its
    timings passed) ended the profile in a traceback (exit 1); now one line naming the
    stage (exit 2), the output left unwritten."""
    pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch)")
    out = tmp_path / "p.json"
    model = ["tests.support.tiny_models:REFUSES_HOOKS", "--input-shape", "16"]
    args = [*model, "--stages", "2", "--split", "1", "--batch-size", "4"]
    result = run("profile", *args, "--repeats", "1", "--warmup", "0", "-q", "--out", str(out))
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line == (
        "tidgap: error: tests.support.tiny_models:REFUSES_HOOKS: stage '1-2': measuring what "
        "a forward of 4 samples holds failed: ValueError: saved-tensors hooks are not supported"
    )
    assert not out.exists()


def test_a_profile_records_activation_bytes_and_byte_limits_work(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch)")
    out = tmp_path / "p.json"
    args = [*MLP, "--stages", "2", "--batch-size", "8", "--repeats", "1", "--warmup", "0"]
    result = run("profile", *args, "--out", str(out), "-q")
    assert result.exit_code == 0, result.stderr
    document = json.loads(out.read_text())
    assert "batch_statistics" not in document["source"]  # no layer normalises by its batch
    held = [stage["activation_bytes"] for stage in document["stages"]]
    assert all(isinstance(b, int) and b > 0 for b in held)
    memory = document["source"]["memory"]  # what a recomputing stage holds, per sample
    assert memory["input_bytes_per_sample"] == [0, *document["source"]["links"]["bytes_per_sample"]]
    assert memory["draw_bytes_per_sample"] == [0, 0]  # no random operator in the MLP
    assert all(b > 0 for b in memory["recompute_backward_bytes_per_sample"])
    limit = str(8 * max(held))  # every stage may hold the whole batch
    found = run("search", str(out), "--memory-limit", limit, "--generations", "3", "--json")
    assert found.exit_code == 0, found.stderr
    assert json.loads(found.stdout)["search"]["memory_limit"].endswith("B")


def test_the_cuda_peak_is_the_allocators_peak_over_a_forward_and_backward(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On CUDA (the allocator's counters stubbed here): the peak read after the backward,
    less what was allocated before, with earlier gradients cleared first (their buffers
    count in the peak) and after; ``None`` on the CPU."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch)")
    from torch import nn

    from tidgap.profiling.measure import cuda_peak_bytes
    from tidgap.profiling.run import StageMeasurements, memory_source

    layer = nn.Linear(3, 5)
    calls: list[str] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append("sync"))
    monkeypatch.setattr(
        torch.cuda, "reset_peak_memory_stats", lambda device=None: calls.append("reset")
    )
    # 1000 bytes before once the earlier gradients are gone (5000 while they are held)
    monkeypatch.setattr(
        torch.cuda,
        "memory_allocated",
        lambda device=None: 1000 if layer.weight.grad is None else 5000,
    )
    monkeypatch.setattr(
        torch.cuda,
        "max_memory_allocated",
        lambda device=None: 1000 + (4096 if layer.weight.grad is not None else 1),
    )
    x = torch.randn(4, 3)
    layer.weight.grad = torch.ones_like(layer.weight)  # an earlier backward's
    assert cuda_peak_bytes(layer, x, False, torch.device("cuda")) == 4096
    assert calls == ["sync", "reset", "sync"] and layer.weight.grad is None
    assert cuda_peak_bytes(layer, x, False, torch.device("cpu")) is None

    def memory(peaks: list[int | None]) -> dict:
        recompute = [(3, 4, 7, 1, 9, 4), (5, 6, 8, 2, 0, 0)]
        measured = StageMeasurements(["a", "b"], [], [1, 2], recompute, peaks, None, {})
        return memory_source(measured, 8)["memory"]

    assert "cuda_peak_allocated_bytes" not in memory([None, None])
    assert memory([10, 20])["cuda_peak_allocated_bytes"] == [10, 20]
    assert memory([10, 20])["input_bytes_per_sample"] == [3, 5]
    assert memory([None, None])["draw_bytes_per_sample"] == [4, 6]
    assert memory([None, None])["recompute_backward_bytes_per_sample"] == [7, 8]
    assert memory([None, None])["task_bytes_per_sample"] == [1, 2]
    assert memory([None, None])["recompute_backward_bytes_per_chunk"] == [9, 0]
    assert memory([None, None])["shared_draw_bytes_per_sample"] == [4, 0]


@pytest.mark.parametrize("split", [[1], [2]])
def test_a_stage_failing_is_named_a_stage(split: list[int]) -> None:
    """What fails in the stages' own forwards (layers that pass alone but not together)
    said "layer '1-2' failed": '1-2' is a stage."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch)")
    from tests.support.tiny_models import RAISING
    from tidgap.model.errors import InputError
    from tidgap.profiling import run as profiling
    from tidgap.profiling.models import Model

    layers = torch.nn.Sequential(torch.nn.Linear(16, 16), *RAISING)
    model = Model(
        "raising", layers, lambda size, device: torch.randn(size, 16), {"input_shape": [16]}
    )
    settings = profiling.Settings(
        "t", 2, 4, 1, 4, None, "cpu", 1, 0, None, 10.0, 0.05
    )  # fmt: skip
    label = "1-2" if split == [1] else "2"
    with pytest.raises(InputError, match=f"^stage '{label}' failed on 1 sample: ValueError"):
        profiling.measure_stages(model, settings, (split, {}), torch.device("cpu"), [1, 4], print)
