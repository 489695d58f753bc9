"""A stage's random draws (dropout masks and the like) recorded per forward chunk and
replayed per sample when a recomputing stage re-runs the forward of a backward chunk.

A recompute stage (:class:`tidgap.runtime.stage.TorchStage`) runs each forward chunk
without a graph and, at backward time, the forward of the backward chunk's samples again,
whose boundaries differ from the forward chunks'. Drawn anew, its dropout masks would not
be those the forward's outputs were computed with, and the gradients would belong to
another function. So, in train mode, :class:`Recording` keeps the outputs of every random
operator (an ATen operator tagged ``nondeterministic_seeded``: ``bernoulli_``,
``native_dropout``, ``rand_like``, ...) of each forward chunk, in the order they ran, and
:class:`Replay` gives the recomputed forward the same values: the rows of its samples, cut
from the chunks that drew them. Both are ``TorchDispatchMode``s, below autograd, so the
operators' derivatives use the replayed values as they used the drawn ones. A random
operator's tensors must have the chunk's samples as their first dimension (dropout on
activations and on attention weights does; a fused attention kernel that returns its
generator's seed does not); one that does not, or a recomputation that runs other random
operators than the forward did, is a :class:`NotReplayable` naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

Samples = tuple[int, int]


class NotReplayable(RuntimeError):
    """A forward's random draws that cannot be replayed per sample, and why."""


@cache
def is_random(operator: Any) -> bool:
    """Whether the ATen ``operator`` draws from a random generator."""
    return torch.Tag.nondeterministic_seeded in operator.tags


def is_in_place(operator: Any) -> bool:
    """Whether ``operator`` writes into its first argument (``bernoulli_``, ...)."""
    return operator.overloadpacket.__name__.endswith("_")


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
    its output tensors (copies, ``(chunk samples, ...)`` each) and their structure."""

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
        if is_random(func):
            leaves, structure = pytree.tree_flatten(out)
            if not all(isinstance(leaf, Tensor) for leaf in leaves):
                raise NotReplayable(f"{func} returned something other than tensors")
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
                            "the samples, so a recomputation cannot replay it per sample"
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
        self._draws = list(reversed(draws))

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
        if not is_random(func):
            return func(*args, **(kwargs or {}))
        draw = self.take(str(func), drawn_shapes(func, args, kwargs or {}))
        if is_in_place(func):
            return args[0].copy_(draw.tensors[0])
        return pytree.tree_unflatten([t.clone() for t in draw.tensors], draw.structure)

    def check_done(self) -> None:
        """:class:`NotReplayable` if the recomputed forward ran fewer random operators
        than its forward chunks did."""
        if self._draws:
            raise NotReplayable(
                f"a recomputed forward did not run {self._draws[-1].name}, which its forward "
                "ran: the stage's random draws cannot be replayed"
            )


#: The name of an ``nn.Dropout``'s mask among a forward's draws.
DROPOUT_MASK = "nn.Dropout mask"


def replayable_dropout(
    module: nn.Dropout, active: Callable[[], Recording | Replay | None]
) -> Callable[[Tensor], Tensor]:
    """A forward for the ``nn.Dropout`` ``module`` that, while ``active()`` is a
    :class:`Recording` or :class:`Replay` and the module trains, draws its keep mask
    ``(x.shape)`` bool itself and records it, or takes the replayed one, and returns
    ``x * mask / (1 - p)``, as ``F.dropout`` computes; otherwise ``F.dropout``. Outside any
    dispatch mode: no Python dispatch per operator (the usual dropout costs)."""

    def forward(x: Tensor) -> Tensor:
        mode = active()
        if mode is None or not module.training or module.p == 0:
            return functional.dropout(x, module.p, module.training, module.inplace)
        if module.p == 1:
            return x * 0
        with _disable_current_modes():
            if isinstance(mode, Replay):
                keep = mode.take(DROPOUT_MASK, [tuple(x.shape)]).tensors[0]
            else:
                keep = torch.empty_like(x, dtype=torch.bool).bernoulli_(1 - module.p)
                mode.draws.append(Draw(DROPOUT_MASK, [keep], pytree.tree_flatten(keep)[1]))
            return x * keep / (1 - module.p)

    return forward


class _Locating(TorchDispatchMode):
    """Notes, for each random operator run inside it, the innermost module running
    (``stack``'s last; ``None`` outside every module)."""

    def __init__(self, stack: list[nn.Module]) -> None:
        super().__init__()
        self.stack = stack
        self.found: list[nn.Module | None] = []

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        if is_random(func):
            self.found.append(self.stack[-1] if self.stack else None)
        return func(*args, **(kwargs or {}))


class DrawingModules:
    """Where a stage's random operators run, so that only those parts of its forwards pay
    for Python dispatch (about 35 us an operator; a quarter of a small GPT block's CPU
    forward): the first block run :meth:`under` a mode runs wholly under it and finds the
    innermost modules inside which random operators ran (global module hooks keep the
    stack of running modules); from then on only those modules' forwards run under the
    mode (their own hooks). Random operators elsewhere later are not seen: a caller
    checks the generators (:func:`generators_unchanged`)."""

    def __init__(self, root: nn.Module) -> None:
        self._root = root
        self._found: list[nn.Module] | None = None
        self._mode: Recording | Replay | None = None
        self._depth = 0
        for module in root.modules():
            if type(module) is nn.Dropout:  # its own subclasses may draw otherwise
                module.forward = replayable_dropout(module, lambda: self._mode)

    @contextmanager
    def under(self, mode: Recording | Replay) -> Iterator[None]:
        """Record or replay the random draws of the block through ``mode``."""
        self._mode = mode
        try:
            if self._found is None:
                with self._located(mode):
                    yield
            else:
                yield
        finally:
            if self._depth:  # a module's forward raised before its hook ran
                mode.__exit__(None, None, None)
            self._mode, self._depth = None, 0

    @contextmanager
    def _located(self, mode: Recording | Replay) -> Iterator[None]:
        """The block wholly under ``mode``, the modules that drew found and hooked."""
        stack: list[nn.Module] = []

        def entered(module: nn.Module, args: Any) -> None:
            stack.append(module)

        def left(module: nn.Module, args: Any, output: Any) -> None:
            stack.pop()

        hooks = [
            nn.modules.module.register_module_forward_pre_hook(entered),
            nn.modules.module.register_module_forward_hook(left),
        ]
        locating = _Locating(stack)
        try:
            with mode, locating:
                yield
        finally:
            for hook in hooks:
                hook.remove()
        inside = {id(module) for module in self._root.modules()}
        found = {
            id(module): module
            for module in (m if m is not None and id(m) in inside else self._root
                           for m in locating.found)
        }  # fmt: skip
        self._found = list(found.values())
        for module in self._found:
            module.register_forward_pre_hook(self._enter)
            module.register_forward_hook(self._leave)

    def _enter(self, module: nn.Module, args: Any) -> None:
        if self._mode is not None:
            if self._depth == 0:
                self._mode.__enter__()
            self._depth += 1

    def _leave(self, module: nn.Module, args: Any, output: Any) -> None:
        if self._mode is not None and self._depth:
            self._depth -= 1
            if self._depth == 0:
                self._mode.__exit__(None, None, None)


def generator_states(device: torch.device) -> list[Tensor]:
    """The states of the random generators a stage on ``device`` draws from."""
    states = [torch.get_rng_state()]
    if device.type == "cuda":
        states.append(torch.cuda.get_rng_state(device))
    return states


@contextmanager
def generators_unchanged(device: torch.device) -> Iterator[None]:
    """:class:`NotReplayable` at the end of the block if it drew random values (from the
    generators of ``device``)."""
    before = generator_states(device)
    yield
    after = generator_states(device)
    if not all(torch.equal(a, b) for a, b in zip(before, after, strict=True)):
        raise NotReplayable(
            "a recomputed forward drew random values its forward drew outside the "
            "operators recorded (in another module than before)"
        )
