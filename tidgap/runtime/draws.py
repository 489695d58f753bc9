"""A stage's random draws (dropout masks and the like) recorded per forward chunk and
replayed per sample when a recomputing stage re-runs the forward of a backward chunk.

A recompute stage (:class:`tidgap.runtime.stage.TorchStage`) runs each forward chunk
without a graph and, at backward time, the forward of the backward chunk's samples again,
whose boundaries differ from the forward chunks'. Drawn anew, its dropout masks would not
be those the forward's outputs were computed with, and the gradients would belong to
another function. So, in train mode, each forward chunk's draws are kept in the order they
ran (:class:`Recording`: the outputs of every random ATen operator, one tagged
``nondeterministic_seeded``, run inside it), and the recomputed forward is given the same
values (:class:`Replay`): the rows of its samples, cut from the chunks that drew them
(:class:`RecordedDraws`). Both are ``TorchDispatchMode``s, below autograd, so the
operators' derivatives use the replayed values as they used the drawn ones; where the
stage draws and how ``nn.Dropout`` avoids Python dispatch: :mod:`tidgap.runtime.drawing`.
A draw's tensors must have the chunk's samples as their first dimension (dropout on
activations and on attention weights does; a fused attention kernel that returns its
generator's seed does not); one that does not, or a recomputation that draws other values
than the forward did, is a :class:`NotReplayable` naming it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

import torch
from torch import Tensor
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

Samples = tuple[int, int]


class NotReplayable(RuntimeError):
    """A forward's random draws that cannot be replayed per sample, and why."""


@cache
def is_random(operator: Any) -> bool:
    """Whether the ATen ``operator`` draws from a random generator."""
    return torch.Tag.nondeterministic_seeded in operator.tags


def draws_now(operator: Any, args: tuple, kwargs: dict) -> bool:
    """Whether ``operator`` draws on these arguments: a random one (:func:`is_random`), but
    not one whose only draw is its ``dropout_p`` given 0 (the fused attention kernels:
    recorded, their outputs were kept as draws until the backward, and replayed, laid out
    otherwise than the kernel's)."""
    if not is_random(operator):
        return False
    for i, argument in enumerate(operator._schema.arguments):
        if argument.name == "dropout_p":
            value = args[i] if i < len(args) else kwargs.get("dropout_p", argument.default_value)
            return value != 0
    return True


def is_in_place(operator: Any) -> bool:
    """Whether ``operator`` writes into its first argument (``bernoulli_``, ...)."""
    return operator.overloadpacket.__name__.endswith("_")


def written_arguments(operator: Any, args: tuple, kwargs: dict) -> list[Tensor]:
    """The tensors among ``args`` and ``kwargs`` that ``operator``, not in place, also
    writes into (its schema's ``!``): ``rrelu_with_noise``'s ``noise``, the slopes its
    backward reads. Part of its draw: replaying only the output left them unwritten."""
    if is_in_place(operator):
        return []
    written = []
    for i, argument in enumerate(operator._schema.arguments):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        value = args[i] if i < len(args) else kwargs.get(argument.name)
        if isinstance(value, Tensor):
            written.append(value)
    return written


def drawn_shapes(operator: Any, args: tuple, kwargs: dict) -> list[tuple[int, ...]]:
    """The shapes of the tensors ``operator`` would return on ``args`` and ``kwargs``,
    found on meta tensors (no value drawn, no generator advanced)."""
    if is_in_place(operator):
        return [tuple(args[0].shape)]
    meta = pytree.tree_map_only(Tensor, lambda tensor: tensor.to("meta"), (args, kwargs))
    try:
        out = operator(*meta[0], **meta[1])
    except Exception as error:  # an operator without a meta kernel
        raise NotReplayable(f"{operator}: its output shapes are unknown ({error})") from None
    return [tuple(leaf.shape) for leaf in pytree.tree_leaves(out)]


@dataclass(frozen=True)
class Draw:
    """One random operator's outputs in one forward chunk: the ``name`` of the operator,
    its output tensors (copies, ``(chunk samples, ...)`` each) and their structure (whose
    leaves are the first tensors; the others are what it wrote into its arguments,
    :func:`written_arguments`)."""

    name: str
    tensors: list[Tensor]
    structure: Any


class Recording(TorchDispatchMode):
    """Inside it, each random operator runs as usual and a copy of its outputs is kept, in
    order (``draws``)."""

    def __init__(self) -> None:
        super().__init__()
        self.draws: list[Draw] = []

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        if draws_now(func, args, kwargs or {}):
            leaves, structure = pytree.tree_flatten(out)
            if not all(isinstance(leaf, Tensor) for leaf in leaves):
                raise NotReplayable(f"{func} returned something other than tensors")
            leaves += written_arguments(func, args, kwargs or {})
            self.draws.append(Draw(str(func), [leaf.clone() for leaf in leaves], structure))
        return out


@dataclass
class RecordedDraws:
    """Each forward chunk's draws: ``(samples, draws)`` in the order the chunks ran."""

    chunks: list[tuple[Samples, list[Draw]]] = field(default_factory=list)

    def add(self, samples: Samples, draws: list[Draw]) -> None:
        """Keep the ``draws`` of the forward chunk of ``samples`` ``(lo, hi)``."""
        self.chunks.append((samples, draws))

    def rows(self, samples: Samples) -> list[Draw]:
        """The draws of a forward of ``samples``: per random operator, its outputs' rows
        for those samples, cut from the forward chunks that hold them and concatenated."""
        lo, hi = samples
        parts = [(s, draws) for s, draws in self.chunks if s[0] < hi and s[1] > lo]
        covered = [s for s, _ in parts]
        if not parts or covered[0][0] > lo or covered[-1][1] < hi:
            raise RuntimeError(f"recompute of samples {samples}: no recorded draws for them")
        counts = {len(draws) for _, draws in parts}
        if len(counts) != 1:
            raise NotReplayable(
                f"recompute of samples {samples}: its forward chunks drew different numbers "
                "of random values"
            )
        joined = []
        for k in range(counts.pop()):
            first = parts[0][1][k]
            tensors = []
            for i in range(len(first.tensors)):
                pieces = []
                for (a, b), draws in parts:
                    tensor = draws[k].tensors[i]
                    if tensor.dim() == 0 or tensor.shape[0] != b - a:
                        raise NotReplayable(
                            f"{draws[k].name} drew a tensor of shape {tuple(tensor.shape)} in "
                            f"the forward of samples {(a, b)}: its first dimension is not "
                            "the samples, so it cannot be replayed per sample (by a "
                            "recomputing stage, or by the gradient check's one-process "
                            "reference)"
                        )
                    pieces.append(tensor[max(lo, a) - a : min(hi, b) - a])
                tensors.append(pieces[0] if len(pieces) == 1 else torch.cat(pieces))
            joined.append(Draw(first.name, tensors, first.structure))
        return joined

    def drop_through(self, sample: int) -> None:
        """Forget the chunks that end at or before ``sample`` (0-based, excluded)."""
        self.chunks = [(s, draws) for s, draws in self.chunks if s[1] > sample]

    def tensors(self) -> list[Tensor]:
        """Every kept tensor (to count what the stage holds)."""
        return [t for _, draws in self.chunks for draw in draws for t in draw.tensors]

    def clear(self) -> None:
        """Forget every chunk."""
        self.chunks.clear()


class Replay(TorchDispatchMode):
    """Inside it, the ``k``-th random operator gives ``draws[k]``'s values instead of
    drawing (written into its first argument when it works in place); other operators run
    as usual. A random operator other than the recorded one, or one too many, is
    :class:`NotReplayable`."""

    def __init__(self, draws: list[Draw]) -> None:
        super().__init__()
        self._given = list(reversed(draws))
        self._draws = list(self._given)

    def rewind(self) -> None:
        """Give the draws again from the first."""
        self._draws = list(self._given)

    def take(self, name: str, shapes: list[tuple[int, ...]]) -> Draw:
        """The next draw, which must be ``name``'s with tensors of ``shapes``."""
        if not self._draws or self._draws[-1].name != name:
            expected = self._draws[-1].name if self._draws else "no more random operators"
            raise NotReplayable(
                f"a recomputed forward ran {name} where its forward ran {expected}: the "
                "stage's random draws cannot be replayed"
            )
        draw = self._draws.pop()
        if shapes != [tuple(t.shape) for t in draw.tensors]:
            raise NotReplayable(
                f"{name} drew shapes {shapes} in a recomputed forward, not those of the "
                "forward's rows: its draws are not per sample"
            )
        return draw

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        if not draws_now(func, args, kwargs or {}):
            return func(*args, **(kwargs or {}))
        written = written_arguments(func, args, kwargs or {})
        shapes = drawn_shapes(func, args, kwargs or {}) + [tuple(t.shape) for t in written]
        draw = self.take(str(func), shapes)
        if is_in_place(func):
            return args[0].copy_(draw.tensors[0])
        outputs = draw.structure.num_leaves
        for target, value in zip(written, draw.tensors[outputs:], strict=True):
            target.copy_(value)
        return pytree.tree_unflatten([t.clone() for t in draw.tensors[:outputs]], draw.structure)

    def check_done(self) -> None:
        """:class:`NotReplayable` if the recomputed forward ran fewer random operators
        than its forward chunks did."""
        if self._draws:
            raise NotReplayable(
                f"a recomputed forward did not run {self._draws[-1].name}, which its forward "
                "ran: the stage's random draws cannot be replayed"
            )


def as_saved(draws: list[Draw]) -> list[dict[str, Any]]:
    """``draws`` as plain data for a rank's result file (which ``torch.load`` reads with
    ``weights_only``): per draw its ``name``, its ``tensors`` on the CPU and its
    ``structure`` (``treespec_dumps``)."""
    return [
        {
            "name": draw.name,
            "tensors": [t.detach().cpu() for t in draw.tensors],
            "structure": pytree.treespec_dumps(draw.structure),
        }
        for draw in draws
    ]


def from_saved(saved: list[dict[str, Any]], device: torch.device) -> list[Draw]:
    """The draws :func:`as_saved` gave, their tensors on ``device``."""
    return [
        Draw(
            each["name"],
            [t.to(device) for t in each["tensors"]],
            pytree.treespec_loads(each["structure"]),
        )
        for each in saved
    ]
