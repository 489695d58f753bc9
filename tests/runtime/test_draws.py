"""Random draws replayed per sample: a recomputing stage in train mode gives the gradients
of the function its forward computed (the same dropout masks), though its backward chunks
cut across its forward chunks."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch)")

from torch import nn  # noqa: E402

from tests.runtime.pipeline_models import FeatureNoise  # noqa: E402
from tidgap.profiling.models import Model, gpt  # noqa: E402
from tidgap.runtime.drawing import DROPOUT_MASK, drawing_of  # noqa: E402
from tidgap.runtime.draws import NotReplayable, RecordedDraws, Recording, Replay  # noqa: E402
from tidgap.runtime.reference import max_relative_difference  # noqa: E402
from tidgap.runtime.stage import TorchStage  # noqa: E402
from tidgap.runtime.task import make_task  # noqa: E402

B = 8


def dropout_gpt() -> Model:
    """A tiny GPT in float64 and train mode: dropout after the embedding, in attention
    (the attention weights, ``(b, heads, L, L)``), after the projection and the MLP."""
    torch.manual_seed(0)
    model = gpt(layers=2, hidden=16, heads=2, seq_len=8, vocab=50)
    model.layers.to(torch.float64).train()
    return model


def stage_on(model: Model, recompute: bool) -> TorchStage:
    """The whole model as one stage (first and last), on a batch of ``B``."""
    task = make_task(model, B, 0, torch.device("cpu"), torch.float64)
    return TorchStage(
        model.layers,
        first=True,
        last=True,
        task=task,
        recompute=recompute,
        input_spec=None,
        output_spec=None,
    )


def gradients_after(
    stage: TorchStage, forward: list[tuple[int, int]], backward: list[tuple[int, int]]
) -> dict[str, torch.Tensor]:
    """The parameters' gradients after one iteration of ``stage``: the forwards of
    ``forward``'s chunks, then the backwards of ``backward``'s, the forwards' random draws
    seeded alike."""
    stage.reset()
    stage.module.zero_grad(set_to_none=True)
    torch.manual_seed(1)
    for samples in forward:
        stage.forward(samples)
    torch.manual_seed(2)  # a recomputation that drew anew would draw other masks
    for samples in backward:
        stage.backward(samples)
    return {name: p.grad.clone() for name, p in stage.module.named_parameters()}


def test_a_recompute_stage_replays_its_forwards_masks_per_sample() -> None:
    """Forward chunks (0, 4), (4, 8); backward chunks (0, 3), (3, 5), (5, 8), each cutting
    across them: the gradients of the stored-graph backward of the same forwards. Both
    stages are made first, on the same layers, as a run makes one per plan."""
    model = dropout_gpt()
    recomputing, storing = stage_on(model, recompute=True), stage_on(model, recompute=False)
    forward, backward = [(0, 4), (4, 8)], [(0, 3), (3, 5), (5, 8)]
    replayed = gradients_after(recomputing, forward, backward)
    stored = gradients_after(storing, forward, [(0, 8)])
    assert recomputing.redrawn is None
    assert drawing_of(model.layers)._found == []  # every draw an nn.Dropout's own: no dispatch
    assert max_relative_difference(replayed, stored) < 1e-10
    model.layers.eval()  # no dropout: the same on both sides, and not the train-mode gradients
    plain = gradients_after(recomputing, forward, backward)
    assert max_relative_difference(plain, stored) > 1e-3


def test_draws_are_cut_per_sample_from_the_chunks_that_made_them() -> None:
    """``bernoulli_`` in place and ``rand`` as an output: the rows of samples 2..6 come from
    the two chunks that drew them; replayed, in place or returned, in order."""
    recorded = RecordedDraws()
    for samples in ((0, 4), (4, 8)):
        recording = Recording()
        with recording:
            torch.empty(4, 3).bernoulli_(0.5)
            torch.rand(4, 2)
        recorded.add(samples, recording.draws)
    rows = recorded.rows((2, 6))
    masks = [draws[0].tensors[0] for _, draws in recorded.chunks]
    assert torch.equal(rows[0].tensors[0], torch.cat([masks[0][2:], masks[1][:2]]))
    replay = Replay(rows)
    with replay:
        mask = torch.zeros(4, 3).bernoulli_(0.5)
        uniform = torch.rand(4, 2)
    replay.check_done()
    assert torch.equal(mask, rows[0].tensors[0]) and torch.equal(uniform, rows[1].tensors[0])
    recorded.drop_through(4)
    assert [samples for samples, _ in recorded.chunks] == [(4, 8)]


def test_draws_that_cannot_be_replayed_per_sample_are_an_error() -> None:
    """A draw whose first dimension is not the samples; a recomputation that draws other
    values, or fewer, than its forward."""
    recorded = RecordedDraws()
    recording = Recording()
    with recording:
        torch.rand(3)  # 3 values for a chunk of 4 samples
    recorded.add((0, 4), recording.draws)
    with pytest.raises(NotReplayable, match="its first dimension is not the samples"):
        recorded.rows((0, 2))
    recorded = RecordedDraws()
    recording = Recording()
    with recording:
        torch.rand(4)
    recorded.add((0, 4), recording.draws)
    with pytest.raises(NotReplayable, match="cannot be replayed"), Replay(recorded.rows((0, 4))):
        torch.randn(4)
    replay = Replay(recorded.rows((0, 4)))
    with replay:
        pass
    with pytest.raises(NotReplayable, match="did not run"):
        replay.check_done()


def test_an_eval_mode_or_aligned_stage_records_nothing() -> None:
    """Only a recompute stage in train mode keeps draws (so they are held memory only
    there)."""
    torch.manual_seed(0)
    layers = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    model = Model("t", layers, lambda b, device: torch.randn(b, 4), {"input_shape": [4]})
    task = make_task(model, B, 0, torch.device("cpu"), torch.float32)
    for recompute, training, kept in ((True, True, 1), (True, False, 0), (False, True, 0)):
        layers.train(training)
        stage = TorchStage(
            layers, first=True, last=True, task=task, recompute=recompute,
            input_spec=None, output_spec=None,
        )  # fmt: skip
        stage.forward((0, 8))
        assert len(stage._draws.chunks) == kept


def test_a_stage_whose_draws_cannot_be_replayed_draws_anew_and_says_why() -> None:
    torch.manual_seed(0)
    layers = nn.Sequential(nn.Linear(4, 3), FeatureNoise(), nn.Linear(3, 1))
    model = Model("t", layers, lambda b, device: torch.randn(b, 4), {"input_shape": [4]})
    task = make_task(model, B, 0, torch.device("cpu"), torch.float32)
    stage = TorchStage(
        layers, first=True, last=True, task=task, recompute=True,
        input_spec=None, output_spec=None,
    )  # fmt: skip
    for samples in ((0, 4), (4, 8)):
        stage.forward(samples)
    stage.backward((0, 6))
    assert stage.redrawn is not None and "its first dimension is not the samples" in stage.redrawn
    assert stage._draws.chunks == []  # no more recording from then on
    stage.backward((6, 8))
    stage.reset()
    stage.forward((0, 8))
    assert stage._draws.chunks == []
    assert all(p.grad is not None for p in layers.parameters())


def test_draws_whose_shape_only_looks_per_sample_are_not_replayed() -> None:
    """Noise over 4 features in chunks of 4 samples: its rows for 6 samples would not fit."""
    recorded = RecordedDraws()
    for samples in ((0, 4), (4, 8)):
        recording = Recording()
        with recording:
            torch.rand(4)
        recorded.add(samples, recording.draws)
    replay = Replay(recorded.rows((0, 6)))
    with pytest.raises(NotReplayable, match="its draws are not per sample"), replay:
        torch.rand(4)


def test_the_gpts_draws_all_take_the_dropout_path_without_python_dispatch() -> None:
    """Every random draw of the built-in GPT is an ``nn.Dropout``'s mask (attention's
    too), so after the first forward no module of it runs under a dispatch mode."""
    from tidgap.runtime.drawing import DROPOUT_MASK, drawing_of

    model = dropout_gpt()
    drawing = drawing_of(model.layers)
    recording = Recording()
    tokens = model.input(2, torch.device("cpu"))
    with torch.no_grad(), drawing.under(recording):
        model.layers(tokens)
    assert [draw.name for draw in recording.draws] == [DROPOUT_MASK] * 7
    assert drawing._found == []


def test_the_profiled_draw_bytes_are_what_a_recomputing_stage_keeps() -> None:
    """``recompute_bytes_per_sample``'s draws are those a recomputing stage records of one
    forward (the GPT's bool dropout masks; a random operator outside ``nn.Dropout``,
    whole), 0 in eval mode, and the module's dropouts are left as they were."""
    from tidgap.profiling.measure import recompute_bytes_per_sample

    def recorded(model: Model) -> int:
        stage = stage_on(model, recompute=True)
        stage.forward((0, B))
        return sum(t.numel() * t.element_size() for t in stage._draws.tensors())

    def profiled(model: Model) -> int:
        x = make_task(model, B, 0, torch.device("cpu"), torch.float64).inputs
        return B * recompute_bytes_per_sample(model.layers, x, True, None)[1]

    model = dropout_gpt()
    assert profiled(model) == recorded(model) > 0
    torch.manual_seed(0)
    layers = nn.Sequential(nn.Linear(4, 6), nn.Dropout(0.5), FeatureNoise()).double().train()
    noisy = Model("t", layers, lambda b, device: torch.randn(b, 4), {"input_shape": [4]})
    assert profiled(noisy) == B * 6 + 6 * 4  # a bool mask per sample; the noise, float32
    assert not any("forward" in vars(m) for m in layers.modules())  # left as it was
    assert profiled(noisy) == recorded(noisy)
    model.layers.eval()
    assert profiled(model) == 0


def test_the_profile_measures_dropout_draws_without_a_dispatch_mode() -> None:
    """A model whose only random operators are ``nn.Dropout`` layers is measured without a
    Python dispatch mode (one imports ``torch._dynamo``: seconds, and a folder in the
    temporary directory, in every profiling process)."""
    printed = printed_by(
        "from tidgap.profiling.measure import recompute_bytes_per_sample\n"
        "layers = nn.Sequential(nn.Linear(4, 6), nn.Dropout(0.5)).train()\n"
        "drawn = recompute_bytes_per_sample(layers, torch.randn(8, 4), False, None)[1]\n"
        "print(drawn, 'torch._dynamo' in sys.modules)\n"
    )
    assert printed == ["6", "False"]  # a bool mask of 6 per sample


def printed_by(script: str) -> list[str]:
    """The words ``script`` prints, run by a fresh Python after ``import sys, torch`` and
    ``from torch import nn``."""
    import subprocess
    import sys

    preamble = "import sys, torch\nfrom torch import nn\n"
    done = subprocess.run([sys.executable, "-c", preamble + script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_another_random_operator_runs_the_first_forward_again_under_the_dispatch_mode() -> None:
    """A first forward that moved the default generator (an ``nn.RReLU``'s noise) ran
    outside the recording: it runs again wholly under the mode, from the same generator
    state and buffers (a batch norm's running mean moves once, as by one forward), and
    records every draw."""
    torch.manual_seed(0)
    layers = (
        nn.Sequential(
            nn.Linear(4, 6), nn.BatchNorm1d(6), nn.RReLU(), nn.Dropout(0.5), nn.Linear(6, 1)
        )
        .double()
        .train()
    )
    model = Model("t", layers, lambda b, device: torch.randn(b, 4), {"input_shape": [4]})
    stage = stage_on(model, recompute=True)
    x = make_task(model, B, 0, torch.device("cpu"), torch.float64).inputs[:4]
    batch_norm = layers[1]
    expected = (1 - batch_norm.momentum) * batch_norm.running_mean
    expected += batch_norm.momentum * layers[0](x).mean(0).detach()
    stage.forward((0, 4))
    assert torch.allclose(batch_norm.running_mean, expected)
    assert drawing_of(layers)._found == [layers[2]]  # located; nn.Dropout draws on its own
    [(_, draws)] = stage._draws.chunks
    assert len(draws) == 2 and DROPOUT_MASK in [draw.name for draw in draws]


def test_the_one_process_replay_finds_every_draw_after_a_first_try_without_the_mode() -> None:
    """The gradient check's replayed forward (:func:`replayed_forward`) of layers whose
    ``nn.RReLU`` draws from the default generator: the first try without the mode finds a
    draw it cannot take in order, so the replay starts again under the mode and gives the
    recorded forward's output exactly."""
    import copy

    from tidgap.runtime.reference import replayed_forward

    torch.manual_seed(0)
    layers = nn.Sequential(nn.Linear(4, 6), nn.Dropout(0.5), nn.RReLU(), nn.Linear(6, 1))
    layers = layers.double().train()
    twin = copy.deepcopy(layers)  # before either has a DrawingModules
    x = torch.randn(8, 4, dtype=torch.float64)
    recording = Recording()
    recorded = drawing_of(layers).run(recording, lambda: layers(x), x.device)
    replayed = replayed_forward([twin], [recording.draws])(x)
    assert torch.equal(replayed, recorded)
    assert drawing_of(twin)._found == [twin[2]]


class OwnNoise(nn.Module):
    """Multiplicative noise per sample from a generator of the module's own: code tidgap
    does not know, whose draws the default generators do not show."""

    def __init__(self) -> None:
        super().__init__()
        self.generator = torch.Generator()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        noise = torch.rand(x.shape, generator=self.generator, dtype=x.dtype)
        return x * noise if self.training else x


def test_a_modules_own_random_operators_are_found_and_replayed_per_sample() -> None:
    """A layer of code tidgap does not know, drawing from its own generator: located on
    the first forward, under the mode, and replayed, so recomputed backwards cutting
    across the forward chunks give the stored graphs' gradients."""
    torch.manual_seed(0)
    noise = OwnNoise()
    layers = nn.Sequential(nn.Linear(4, 6), noise, nn.Linear(6, 1)).double()
    model = Model("t", layers.train(), lambda b, d: torch.randn(b, 4), {"input_shape": [4]})
    recomputing, storing = stage_on(model, recompute=True), stage_on(model, recompute=False)
    forward = [(0, 4), (4, 8)]
    noise.generator.manual_seed(3)
    replayed = gradients_after(recomputing, forward, [(0, 3), (3, 5), (5, 8)])
    noise.generator.manual_seed(3)
    stored = gradients_after(storing, forward, [(0, 8)])
    assert recomputing.redrawn is None
    assert drawing_of(layers)._found == [noise]
    assert max_relative_difference(replayed, stored) < 1e-10


def test_an_operator_that_draws_into_an_argument_is_replayed_with_it() -> None:
    """``nn.RReLU`` in train mode: ``rrelu_with_noise`` writes its slopes into ``noise``,
    which its backward reads. Replayed with the output alone, the slopes were never
    written: gradients of 1e306 on any plan, as the gradient check's one-process replay
    recomputes too."""
    torch.manual_seed(0)
    layers = nn.Sequential(nn.Linear(4, 6), nn.RReLU(), nn.Linear(6, 1)).double()
    model = Model("t", layers.train(), lambda b, d: torch.randn(b, 4), {"input_shape": [4]})
    recomputing, storing = stage_on(model, recompute=True), stage_on(model, recompute=False)
    forward = [(0, 4), (4, 8)]
    torch.manual_seed(3)
    replayed = gradients_after(recomputing, forward, [(0, 3), (3, 5), (5, 8)])
    torch.manual_seed(3)
    stored = gradients_after(storing, forward, [(0, 8)])
    assert recomputing.redrawn is None
    assert max_relative_difference(replayed, stored) < 1e-10


def test_a_recomputing_stage_whose_only_random_operators_are_dropouts_needs_no_dispatch() -> None:
    """Forwards and recomputed backwards of a dropout model without a Python dispatch mode
    (one imports ``torch._dynamo``: seconds, and a folder in the temporary directory)."""
    printed = printed_by(
        "from tidgap.profiling.models import Model\n"
        "from tidgap.runtime.stage import TorchStage\n"
        "from tidgap.runtime.task import make_task\n"
        "layers = nn.Sequential(nn.Linear(4, 6), nn.Dropout(0.5), nn.Linear(6, 1)).train()\n"
        "model = Model('t', layers, lambda b, d: torch.randn(b, 4), {'input_shape': [4]})\n"
        "task = make_task(model, 8, 0, torch.device('cpu'), torch.float32)\n"
        "stage = TorchStage(layers, first=True, last=True, task=task, recompute=True,\n"
        "                   input_spec=None, output_spec=None)\n"
        "for samples in ((0, 4), (4, 8)):\n"
        "    stage.forward(samples)\n"
        "for samples in ((0, 3), (3, 8)):\n"
        "    stage.backward(samples)\n"
        "print(stage.redrawn, len(stage._draws.chunks), 'torch._dynamo' in sys.modules)\n"
    )
    assert printed == ["None", "0", "False"]
