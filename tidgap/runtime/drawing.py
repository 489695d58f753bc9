"""Where a recomputing stage draws random values, so that recording and replaying them
(:mod:`tidgap.runtime.draws`) costs little: ``nn.Dropout`` draws its own mask
(:func:`replayable_dropout`); other random operators are found once and only the modules
that run them go through Python dispatch (:class:`DrawingModules`); a draw elsewhere
later shows in the random generators' states (:func:`generators_unchanged`).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any, TypeVar

import torch
from torch import Tensor, nn
from torch.nn import functional
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from tidgap.runtime.draws import Draw, NotReplayable, Recording, Replay, draws_now

#: The name of an ``nn.Dropout``'s mask among a forward's draws.
DROPOUT_MASK = "nn.Dropout mask"

T = TypeVar("T")


def replayable_dropout(
    module: nn.Dropout,
    active: Callable[[], Recording | Replay | None],
    own: Callable[[torch.device], torch.Generator] | None = None,
) -> Callable[[Tensor], Tensor]:
    """A forward for the ``nn.Dropout`` ``module`` that, while ``active()`` is a
    :class:`Recording` or :class:`Replay` and the module trains, draws its keep mask
    ``(x.shape)`` bool itself and records it, or takes the replayed one, and returns
    ``x * mask / (1 - p)``, as ``F.dropout`` computes; otherwise ``F.dropout``. Outside any
    dispatch mode: no Python dispatch per operator (the usual dropout costs). The masks
    draw from ``own(device)`` where it is given, else from the device's default generator."""

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
                generator = None if own is None else own(x.device)
                keep = torch.empty_like(x, dtype=torch.bool)
                keep.bernoulli_(1 - module.p, generator=generator)
                mode.draws.append(Draw(DROPOUT_MASK, [keep], pytree.tree_flatten(keep)[1]))
            return x * keep / (1 - module.p)

    return forward


class OwnGenerators:
    """Generators of one's own, one per device, made on first use and seeded from
    ``torch.initial_seed()``: what ``nn.Dropout`` masks draw from, so that the default
    generators' states show whether any other random operator drew."""

    def __init__(self) -> None:
        self._by_device: dict[torch.device, torch.Generator] = {}

    def __call__(self, device: torch.device) -> torch.Generator:
        if device not in self._by_device:
            self._by_device[device] = torch.Generator(device).manual_seed(torch.initial_seed())
        return self._by_device[device]


def dropout_layers(module: nn.Module) -> list[nn.Module]:
    """``module``'s ``nn.Dropout`` layers, whose forwards :func:`replayable_dropout`
    replaces (not its subclasses, which may draw otherwise)."""
    return [m for m in module.modules() if type(m) is nn.Dropout]


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
        if draws_now(func, args, kwargs or {}):
            self.found.append(self.stack[-1] if self.stack else None)
        return func(*args, **(kwargs or {}))


class DrawingModules:
    """Where a stage's random operators run, so that only those parts of its forwards pay
    for Python dispatch (about 35 us an operator; a quarter of a small GPT block's CPU
    forward): the first block run :meth:`under` a mode runs wholly under it and finds the
    innermost modules inside which random operators ran (global module hooks keep the
    stack of running modules); from then on only those modules' forwards run under the
    mode (their own hooks). Random operators elsewhere later are not seen: a caller
    checks the generators (:func:`generators_unchanged`). :meth:`run` spares the first
    block the mode where the ``nn.Dropout`` layers are the only random operators (their
    masks draw from generators of their own: :class:`OwnGenerators`). One per module
    (:func:`drawing_of`): its ``nn.Dropout`` layers answer to one of them."""

    def __init__(self, root: nn.Module) -> None:
        self._root = root
        self._found: list[nn.Module] | None = None
        self._mode: Recording | Replay | None = None
        self._depth = 0
        own = OwnGenerators()
        for module in dropout_layers(root):
            module.forward = replayable_dropout(module, lambda: self._mode, own)

    def run(self, mode: Recording | Replay, compute: Callable[[], T], device: torch.device) -> T:
        """``compute()`` with its random draws recorded or replayed through ``mode``
        (:meth:`under`). The first call, on a module made of PyTorch's and tidgap's own
        layers (whose random operators draw from the default generators), runs without a
        dispatch mode (one imports ``torch._dynamo``: seconds, and a folder in the
        temporary directory): if the default generators of ``device`` did not move (and a
        replay found every draw in order), the ``nn.Dropout`` layers drew everything and no
        module needs the mode; else the generators and the module's buffers go back to
        where they were, ``mode`` starts again, and ``compute()`` runs again, wholly under
        the mode. A module of other code (which may draw from a generator of its own)
        runs its first call under the mode, as :meth:`under` does."""
        if self._found is None and all(map(_draws_from_default_generators, self._root.modules())):
            before = generator_states(device)
            buffers = [buffer.clone() for buffer in self._root.buffers()]
            self._mode = mode
            try:
                result = compute()
                if not drew_since(before, device):
                    self._found = []
                    return result
            except NotReplayable:  # a replayed draw of another operator came first
                pass
            finally:
                self._mode = None
            set_generator_states(before, device)
            for buffer, saved in zip(self._root.buffers(), buffers, strict=True):
                buffer.copy_(saved)
            if isinstance(mode, Replay):
                mode.rewind()
            else:
                mode.draws.clear()
        with self.under(mode):
            return compute()

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
        """The block wholly under ``mode``, the modules that drew found and hooked. The
        module hooks are global: those of other threads (stages run in-process on threads,
        ``tests/support/runtime_fakes.py``) are left out of the stack."""
        stack: list[nn.Module] = []
        mine = threading.get_ident()

        def entered(module: nn.Module, args: Any) -> None:
            if threading.get_ident() == mine:
                stack.append(module)

        def left(module: nn.Module, args: Any, output: Any) -> None:
            if threading.get_ident() == mine:
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


#: The packages whose layers draw random values only from the default generators.
DEFAULT_DRAWING = ("torch.nn.", "tidgap.profiling.models")


def _draws_from_default_generators(module: nn.Module) -> bool:
    """Whether ``module``'s own code is PyTorch's or a built-in model's
    (:data:`DEFAULT_DRAWING`)."""
    return type(module).__module__.startswith(DEFAULT_DRAWING)


def generator_states(device: torch.device) -> list[Tensor]:
    """The states of the random generators a stage on ``device`` draws from."""
    states = [torch.get_rng_state()]
    if device.type != "cpu":  # a GPU (the runtime computes on the CPU or with CUDA)
        states.append(torch.cuda.get_rng_state(device))
    return states


def set_generator_states(states: list[Tensor], device: torch.device) -> None:
    """Put the random generators of ``device`` back to ``states`` (:func:`generator_states`)."""
    torch.set_rng_state(states[0])
    if device.type != "cpu":
        torch.cuda.set_rng_state(states[1], device)


def drew_since(before: list[Tensor], device: torch.device) -> bool:
    """Whether the random generators of ``device`` moved from the states ``before``
    (:func:`generator_states`)."""
    after = generator_states(device)
    return not all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


@contextmanager
def generators_unchanged(device: torch.device) -> Iterator[None]:
    """:class:`NotReplayable` at the end of the block if it drew random values (from the
    generators of ``device``)."""
    before = generator_states(device)
    yield
    if drew_since(before, device):
        raise NotReplayable(
            "a recomputed forward drew random values its forward drew outside the "
            "operators recorded (in another module than before)"
        )


_BY_MODULE: weakref.WeakKeyDictionary[nn.Module, DrawingModules] = weakref.WeakKeyDictionary()


def drawing_of(module: nn.Module) -> DrawingModules:
    """The :class:`DrawingModules` of ``module``, made on first use: every stage of a run
    computing on ``module`` (plans run in turn in one process) shares it."""
    if module not in _BY_MODULE:
        _BY_MODULE[module] = DrawingModules(module)
    return _BY_MODULE[module]


@contextmanager
def drawing_as_recomputed(module: nn.Module, others: bool) -> Iterator[Recording]:
    """Inside, ``module``'s ``nn.Dropout`` layers draw their keep masks as a recomputing
    stage's forwards record them (:func:`replayable_dropout`, ``bool``) into the
    :class:`Recording` yielded, from generators of their own (:class:`OwnGenerators`).
    With ``others`` the recording is also a dispatch mode around the block and keeps every
    other random operator's outputs; without, no Python dispatch runs (a dispatch mode
    imports ``torch._dynamo``, seconds, and the folder it makes). In eval mode nothing is
    recorded (a stage records only in train mode). The modules' forwards are restored
    after (unlike :func:`drawing_of`, which keeps its own)."""
    recording = Recording()
    if not module.training:
        yield recording
        return
    own = OwnGenerators()
    dropouts = [(m, vars(m).get("forward")) for m in dropout_layers(module)]
    for dropout, _ in dropouts:
        dropout.forward = replayable_dropout(dropout, lambda: recording, own)
    try:
        with recording if others else nullcontext():
            yield recording
    finally:
        for dropout, before in dropouts:
            if before is None:
                del dropout.forward
            else:
                dropout.forward = before
