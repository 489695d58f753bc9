"""The job every worker of one ``tidgap run`` runs: a JSON file (``tidgap.job/1``).

``tidgap run`` writes it into its results folder and starts one worker per stage on it;
under ``torchrun`` every machine needs the job file and the files it names, at the same
paths (relative paths are read from the worker's working folder).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tidgap.model.errors import InputError
from tidgap.model.fileio import read_json, write_json_atomic
from tidgap.model.numbers import MAX_COUNT, MAX_THREADS, MAX_TORCH_SEED, is_integer
from tidgap.profiling.model_options import MODEL_OPTIONS, SHAPE_OPTION
from tidgap.runtime.optimizers import MAX_LR, OPTIMIZERS

JOB_FORMAT = "tidgap.job/1"
#: What chunks may travel over (:attr:`Job.transport`).
TRANSPORTS = ("auto", "gloo", "nccl")


@dataclass(frozen=True)
class Job:
    """What to run and how.

    ``problem``: a problem file or ``example:NAME``; ``plan``: a plan file for it;
    ``alternates``: more plan files for it, run in turn with ``plan`` in the same
    processes (every warm-up and timed iteration runs each plan once, ``plan`` first), so
    that they meet the same moments of the machine; ``device``: ``cpu``, or ``cuda`` (rank
    ``r`` computes on GPU ``LOCAL_RANK`` modulo the GPUs it sees); ``transport``: what chunks
    travel over between ranks, ``gloo`` (through host memory), ``nccl`` (GPU to GPU; every
    rank needs a GPU of its own) or ``auto`` (NCCL where every rank has one, else gloo);
    ``model``: ``gpt``, ``vgg16`` or ``module:attribute`` with ``model_options`` (the
    ``tidgap profile`` model options, ``None`` when not given; required, so that a job
    without them does not run the default GPT); ``boundaries``: the first
    layer of stages ``1..S-1``; ``iterations`` timed after ``warmup`` untimed ones;
    ``threads``: PyTorch threads per worker; ``check_gradients``: one extra first iteration
    (in train mode, its random draws kept; else in eval mode) whose parameter gradients
    each rank saves; ``float64``: model and inputs
    in double precision; ``seed``: weights and data; ``results``: the folder each rank
    writes ``rank<R>.pt`` into; ``timeout``: seconds a worker may take in all;
    ``optimizer``: a :data:`~tidgap.runtime.optimizers.OPTIMIZERS` name each rank steps
    its stage's parameters with after its last backward (the stage's tail; ``None``: no
    step), learning rate ``lr``.
    """

    problem: str
    plan: str
    model: str
    boundaries: list[int]
    results: str
    model_options: dict[str, Any]
    iterations: int = 5
    warmup: int = 1
    threads: int = 1
    check_gradients: bool = False
    float64: bool = False
    seed: int = 0
    timeout: float = 300.0
    optimizer: str | None = None
    lr: float | None = None
    alternates: list[str] = field(default_factory=list)
    device: str = "cpu"
    transport: str = "auto"

    @property
    def plans(self) -> list[str]:
        """Every plan file the job runs, in turn: ``plan``, then the ``alternates``."""
        return [self.plan, *self.alternates]

    def covering(self, count: int) -> Job:
        """This job with its ``timeout``, given per plan, covering ``count`` plans run in
        turn."""
        return dataclasses.replace(self, timeout=self.timeout * count)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the job to ``path`` atomically."""
        write_json_atomic(path, {"format": JOB_FORMAT, **dataclasses.asdict(self)})

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Job:
        """Read a job file; a file that is not a job raises :class:`InputError` naming it."""
        document = read_json(path)
        source = str(Path(path))
        if not isinstance(document, dict) or document.get("format") != JOB_FORMAT:
            raise InputError(f"expected {JOB_FORMAT!r}", ("format",), source=source)
        return cls.from_fields({k: v for k, v in document.items() if k != "format"}, source)

    @classmethod
    def from_fields(cls, document: dict[str, Any], source: str | None = None) -> Job:
        """The job whose fields ``document`` holds (a job file's, less ``format``), each
        checked; :class:`InputError` naming ``source`` and the field otherwise."""
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(document) - fields)
        if unknown:
            raise InputError("unknown field", (unknown[0],), source=source)
        missing = [
            f.name
            for f in dataclasses.fields(cls)
            if f.name not in document
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ]
        if missing:
            raise InputError("is missing", (missing[0],), source=source)
        for name, value in document.items():
            if name in _KINDS and not _KINDS[name][0](value):
                raise InputError(f"expected {_KINDS[name][1]}", (name,), source=source)
        if document.get("optimizer") not in (None, *OPTIMIZERS):
            raise InputError(
                f"expected one of {', '.join(OPTIMIZERS)} or null", ("optimizer",), source=source
            )
        lr = document.get("lr")
        if document.get("optimizer") is not None and not (_positive_number(lr) and lr <= MAX_LR):
            raise InputError(
                f"expected a positive number up to {MAX_LR:g} (the optimizer's learning rate)",
                ("lr",),
                source=source,
            )
        return cls(**document)


def _count(least: int, most: int) -> Callable[[Any], bool]:
    return lambda value: is_integer(value) and least <= value <= most


def _text(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _model_options(value: Any) -> bool:
    """Whether ``value`` is an object of model options (:data:`MODEL_OPTIONS`): each
    ``None``, a positive integer (a count) or, for :data:`SHAPE_OPTION`, text."""
    if not isinstance(value, dict):
        return False
    for name, option in value.items():
        if option is None:
            continue
        if name == SHAPE_OPTION:
            if not _text(option):
                return False
        elif name not in MODEL_OPTIONS or not _count(1, MAX_COUNT)(option):
            return False
    return True


def _positive_number(value: Any) -> bool:
    """Whether ``value`` (from JSON, so finite) is a number above 0 (``true`` is not one)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


#: What each field of a job file must be (beyond ``format``, ``optimizer`` and ``lr``),
#: and how the error says it.
_KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "problem": (_text, "a file name or example:NAME"),
    "plan": (_text, "a file name"),
    "alternates": (
        lambda v: isinstance(v, list) and all(_text(p) for p in v),
        "a list of file names",
    ),
    "model": (_text, "gpt, vgg16 or module:attribute"),
    "results": (_text, "a folder name"),
    "boundaries": (
        lambda v: (
            isinstance(v, list)
            and all(is_integer(b) and b >= 1 for b in v)
            and all(a < b for a, b in itertools.pairwise(v))
        ),
        "a strictly increasing list of layer indices from 1 (the first layers of stages 1..)",
    ),
    "model_options": (
        _model_options,
        "an object of tidgap profile's model options (layers, hidden, heads, seq_len, vocab, "
        "image_size, classes: positive integers or null; input_shape: text like 3,32,32 or "
        "null)",
    ),
    "iterations": (_count(1, MAX_COUNT), "an integer in 1..2**31-1"),
    "warmup": (_count(0, MAX_COUNT), "an integer in 0..2**31-1"),
    "threads": (_count(1, MAX_THREADS), f"an integer in 1..{MAX_THREADS}"),
    "check_gradients": (lambda v: isinstance(v, bool), "true or false"),
    "device": (lambda v: v in ("cpu", "cuda"), "cpu or cuda"),
    "transport": (lambda v: v in TRANSPORTS, " or ".join(TRANSPORTS)),
    "float64": (lambda v: isinstance(v, bool), "true or false"),
    "seed": (_count(0, MAX_TORCH_SEED), "an integer in 0..2**63-1"),
    "timeout": (_positive_number, "a positive number of seconds"),
}
