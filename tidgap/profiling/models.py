"""The models ``tidgap profile`` knows: ``vgg16``, ``gpt`` and ``module:attribute``.

Each is a :class:`torch.nn.Sequential` whose top-level entries (:meth:`Model.named_layers`)
are the layers that stage boundaries fall between, plus a maker of random inputs. Weights
are random: timing needs no trained weights and nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional

from tidgap.model.errors import InputError
from tidgap.model.text import counted
from tidgap.optimize.memory import require_available
from tidgap.profiling.user_code import user_errors

#: VGG16's convolutions: output channels, ``"M"`` for a 2x2 max-pool.
VGG16_CFG: list[int | str] = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M"]
VGG16_CFG += [512, 512, 512, "M", 512, 512, 512, "M"]


#: Modules that hand their input on as it is or as a view of it: an in-place module after
#: them still writes the input.
PASSING = (nn.Identity, nn.Flatten, nn.Unflatten)


def starts_in_place(module: nn.Module) -> bool:
    """Whether ``module``'s first operation that is not a pass-through (:data:`PASSING`)
    writes its input in place, as far as its modules say: one with ``inplace=True``
    (``ReLU``, ``Dropout``, ...), or a ``Sequential`` whose entries start so after
    pass-throughs."""
    if isinstance(module, nn.Sequential):
        for entry in module:
            if starts_in_place(entry):
                return True
            if not passes_input(entry):
                return False
        return False
    return bool(getattr(module, "inplace", False))


def passes_input(module: nn.Module) -> bool:
    """Whether ``module`` hands its input on as it is or as a view of it: one of
    :data:`PASSING`, or a ``Sequential`` of those."""
    if isinstance(module, nn.Sequential):
        return all(passes_input(entry) for entry in module)
    return isinstance(module, PASSING)


def copy_leaf_input(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """A forward pre-hook: an input that is a leaf (what a stage receives, the model's
    input, a profiled layer's, or anything in a forward without grad: a recomputing stage's
    first, whose input it keeps to run again), or a view of one (behind a ``Flatten``), goes
    in as a copy, so that an operation writing its input in place writes the copy (autograd
    refuses to write a leaf wanting a gradient; the model's input and a kept input, written,
    ran the layer twice on a re-run or the next iteration); the gradient still reaches the
    leaf. Other inputs go in as they are."""
    if args and isinstance(args[0], Tensor):
        base = args[0] if args[0]._base is None else args[0]._base
        if base.is_leaf:
            return (args[0].clone(), *args[1:])
    return None


#: The layers :func:`copy_leaf_input` is registered on (once each).
_COPYING: weakref.WeakSet[nn.Module] = weakref.WeakSet()


@dataclass
class Model:
    """A model to profile.

    ``layers``: its top-level entries are the units a split works with;
    ``make_input(b)``: a random input for ``b`` samples on ``device``;
    ``config``: the hyperparameters, recorded in the problem's ``source``.
    """

    name: str
    layers: nn.Sequential
    make_input: Callable[[int, torch.device], Tensor]
    config: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Layers that start in place (:func:`starts_in_place`) copy a leaf input
        (:func:`copy_leaf_input`): each may begin a stage, or be profiled alone."""
        for _, layer in self.named_layers():
            if starts_in_place(layer) and layer not in _COPYING:
                layer.register_forward_pre_hook(copy_leaf_input)
                _COPYING.add(layer)

    def named_layers(self) -> list[tuple[str, nn.Module]]:
        """``layers``' entries in order, names and modules, one placed twice listed twice
        (``named_children`` lists it once: a split then left its repeats out of the
        stages, and profiled and ran another function than the model's)."""
        return [(name, layer) for name, layer in self.layers._modules.items() if layer is not None]

    def input(self, size: int, device: torch.device) -> Tensor:
        """``make_input(size, device)``; its errors (an allocation too large, say) are bad
        input naming the model."""
        with user_errors(f"cannot make an input of {counted(size, 'sample')}", self.name):
            return self.make_input(size, device)


#: Bytes a parameter takes at least while profiling: float32 weights and gradients.
BYTES_PER_PARAMETER = 8
#: VGG16's parameters besides ``fc8``: the convolutions, ``fc6`` and ``fc7``.
VGG16_BODY_PARAMETERS = 134_260_544


def gpt_parameters(layers: int, hidden: int, seq_len: int, vocab: int) -> int:
    """About how many parameters :func:`gpt` has: ``12 h^2 + 13 h`` per block, the token
    and position embeddings and the untied head."""
    return layers * (12 * hidden**2 + 13 * hidden) + (seq_len + 2 * vocab) * hidden


def require_room(name: str, parameters: int) -> None:
    """:class:`InputError` on ``name`` if ``parameters`` cannot fit in the memory
    available now (:data:`BYTES_PER_PARAMETER` each): before building, so a model too large
    is one line, not minutes of allocation ending in the out-of-memory killer."""
    needed = parameters * BYTES_PER_PARAMETER
    require_available(
        needed,
        f"about {parameters:.3g} parameters need {needed / 1e9:.3g} GB for weights and "
        "gradients in float32",
        name,
    )


def vgg16(image_size: int = 224, classes: int = 1000) -> Model:
    """VGG16 (configuration D): 13 conv layers and 3 FC layers on ``(b, 3, H, H)`` images.

    Layers: ``conv1_1`` .. ``conv5_3`` (conv + ReLU, + max-pool after the last of a block),
    ``fc6`` (adaptive average pool to 7x7, flatten, linear, ReLU, dropout), ``fc7``,
    ``fc8``, as torchvision builds it, so the classifier keeps its 25088 inputs.
    """
    if image_size < 32:
        raise InputError(
            f"must be at least 32 (five 2x2 pools), got {image_size}", source="--image-size"
        )
    require_room("vgg16", VGG16_BODY_PARAMETERS + 4097 * classes)
    children: OrderedDict[str, nn.Module] = OrderedDict()
    channels, block, index = 3, 1, 0
    for position, item in enumerate(VGG16_CFG):
        if item == "M":
            block, index = block + 1, 0
            continue
        index += 1
        parts: list[nn.Module] = [
            nn.Conv2d(channels, int(item), 3, padding=1),
            nn.ReLU(inplace=True),
        ]
        if VGG16_CFG[position + 1] == "M":
            parts.append(nn.MaxPool2d(2))
        children[f"conv{block}_{index}"] = nn.Sequential(*parts)
        channels = int(item)
    children["fc6"] = nn.Sequential(
        nn.AdaptiveAvgPool2d(7),
        nn.Flatten(),
        nn.Linear(512 * 7 * 7, 4096),
        nn.ReLU(inplace=True),
        nn.Dropout(),
    )
    children["fc7"] = nn.Sequential(nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Dropout())
    children["fc8"] = nn.Linear(4096, classes)

    def make_input(size: int, device: torch.device) -> Tensor:
        return torch.randn(size, 3, image_size, image_size, device=device)

    config = {"image_size": image_size, "classes": classes}
    return Model("vgg16", nn.Sequential(children), make_input, config)


class Embedding(nn.Module):
    """Token plus learned position embeddings: ``(b, L)`` int64 -> ``(b, L, h)``."""

    def __init__(self, vocab: int, seq_len: int, hidden: int, dropout: float):
        super().__init__()
        self.tokens = nn.Embedding(vocab, hidden)
        self.positions = nn.Embedding(seq_len, hidden)
        self.dropout = nn.Dropout(dropout)

    def forward(self, tokens: Tensor) -> Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        return self.dropout(self.tokens(tokens) + self.positions(positions))


class CausalAttention(nn.Module):
    """Causal scaled dot-product attention: ``(b, heads, L, d)`` queries, keys, values ->
    ``(b, heads, L, d)``. In train mode, dropout on the attention weights through an
    ``nn.Dropout`` (what PyTorch's fused attention computes on the CPU, spelled out), so a
    recomputing stage replays its masks per sample without Python dispatch
    (:class:`tidgap.runtime.drawing.DrawingModules`); otherwise the fused
    ``scaled_dot_product_attention``."""

    def __init__(self, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    def forward(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        if not (self.training and self.dropout.p > 0):
            return functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        length = q.shape[-2]
        scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
        causal = torch.ones(length, length, dtype=torch.bool, device=q.device).tril()
        weights = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        return self.dropout(weights) @ v


class Block(nn.Module):
    """A pre-norm transformer decoder block: causal self-attention, then a 4h GELU MLP.

    ``(b, L, h)`` -> ``(b, L, h)``.
    """

    def __init__(self, hidden: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.attend = CausalAttention(dropout)
        self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.mlp = nn.Sequential(
            nn.Linear(hidden, 4 * hidden),
            nn.GELU(),
            nn.Linear(4 * hidden, hidden),
            nn.Dropout(dropout),
        )
        self.residual_dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        b, length, hidden = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(hidden, dim=2)
        q, k, v = (t.view(b, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attended = self.attend(q, k, v).transpose(1, 2).reshape(b, length, hidden)
        x = x + self.residual_dropout(self.proj(attended))
        return x + self.mlp(self.norm2(x))


def gpt(
    layers: int = 14,
    hidden: int = 768,
    heads: int | None = None,
    seq_len: int = 512,
    vocab: int = 40478,
) -> Model:
    """A GPT-style decoder on ``(b, L)`` token ids; logits ``(b, L, vocab)`` come out.

    Layers: ``embed``, ``block0`` .. ``block{layers-1}``, ``head`` (final LayerNorm and
    the untied vocabulary projection). The defaults are GPT-1 with 14 blocks (the paper's
    GPT1-14): 768 hidden, 12 heads of 64, 512 positions, 40478 tokens, dropout 0.1.
    """
    heads = heads or max(1, hidden // 64)
    if hidden % heads:
        raise InputError(f"{heads} heads do not divide hidden size {hidden}", source="--heads")
    require_room("gpt", gpt_parameters(layers, hidden, seq_len, vocab))
    children: OrderedDict[str, nn.Module] = OrderedDict(
        embed=Embedding(vocab, seq_len, hidden, 0.1)
    )
    for i in range(layers):
        children[f"block{i}"] = Block(hidden, heads, 0.1)
    children["head"] = nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, vocab, bias=False))

    def make_input(size: int, device: torch.device) -> Tensor:
        return torch.randint(0, vocab, (size, seq_len), device=device)

    config = {"layers": layers, "hidden": hidden, "heads": heads, "seq_len": seq_len}
    config["vocab"] = vocab
    return Model("gpt", nn.Sequential(children), make_input, config)


def _imported(module_name: str, reference: str) -> Any:
    """The module ``module_name``; what it prints on import goes to stderr (off
    ``--json``). :class:`InputError` naming ``reference`` if importing it fails, with the
    first line of the error its code raised (``SystemExit`` included)."""
    raised = user_errors(f"importing {module_name!r} failed", reference)
    with contextlib.redirect_stdout(sys.stderr), raised:
        try:
            return importlib.import_module(module_name)
        except ImportError as error:
            message = f"cannot import {module_name!r}: {error}"
            raise InputError(message, source=reference) from None


def from_reference(reference: str, input_shape: tuple[int, ...], vocab: int | None) -> Model:
    """The ``torch.nn.Sequential`` named ``module:attribute`` (the attribute may be dotted).

    Inputs have shape ``(b, *input_shape)``: random floats, or token ids below ``vocab``.
    """
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise InputError("expected module:attribute", source=reference)
    found: Any = _imported(module_name, reference)
    try:
        for part in attribute.split("."):
            found = getattr(found, part)
    except AttributeError:
        raise InputError(
            f"{module_name!r} has no attribute {attribute!r}", source=reference
        ) from None
    if not isinstance(found, nn.Sequential):
        raise InputError(
            f"is of type {type(found).__name__}, not a torch.nn.Sequential", source=reference
        )
    if len(found) == 0:
        raise InputError("the Sequential has no layers", source=reference)

    def make_input(size: int, device: torch.device) -> Tensor:
        if vocab is None:
            return torch.randn(size, *input_shape, device=device)
        return torch.randint(0, vocab, (size, *input_shape), device=device)

    config: dict[str, Any] = {"input_shape": list(input_shape)}
    if vocab is not None:
        config["vocab"] = vocab
    return Model(reference, found, make_input, config)


def parameter_count(model: Model) -> int:
    """The number of trainable parameters (recorded in ``source``)."""
    return sum(p.numel() for p in model.layers.parameters() if p.requires_grad)
