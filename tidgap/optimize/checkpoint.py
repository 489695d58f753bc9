"""Optimizer state files (``tidgap.state/1``): checkpoint a search and resume it.

A state file is a deflated NumPy ``.npz`` archive (no pickles): the populations and their scores
(``state_arrays`` of the optimizer) and ``meta``, one JSON string: ``format``, the
``schedule``, the problem's ``digest`` (SHA-256 of its canonical JSON), ``seed``,
``population``, ``backend``, ``same_partition``, ``backward`` (the rule), ``memory_limit``,
the generator's ``draws``, the ``counters`` (``generation``, ``evaluations``,
``since_improvement``, ``best`` ticks), for a windowed search its first search
(``first_search``: plan, generations, evaluations), and the ``phase``: ``null`` for the
search's own GA, :data:`MIRRORED_PHASE` while a run-priced search runs its mirrored first
search (whose state it then holds, its annealing's too; a resume finishes that search
first), :data:`ANNEAL_PHASE` in the search's own annealing
(:mod:`tidgap.optimize.anneal_checkpoint`). It is written
atomically (readers never see half a file; a failed write keeps the old one). Resuming
rebuilds the search from the same problem and options (the setup is deterministic), then
puts the saved state back: a search of ``G`` generations equals one of ``G1`` resumed for
``G - G1`` more, with the same seed.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import time
import tokenize
import warnings
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from pydantic import ValidationError

from tidgap.backends.ticks import MODEL_PRICING
from tidgap.model.errors import InputError
from tidgap.model.fileio import input_error_from, parse_json, require_file_name
from tidgap.model.numbers import is_integer
from tidgap.model.plan import Plan, check_plan
from tidgap.model.problem import Problem
from tidgap.optimize.backward_rules import FREE
from tidgap.optimize.ga import StopRule
from tidgap.optimize.generations import run_generations
from tidgap.optimize.interrupts import STOP_SIGNALS
from tidgap.outputs.atomic import replace_atomically
from tidgap.schedules.families import SCHEDULES

STATE_FORMAT = "tidgap.state/1"
#: Seconds between checkpoints when none is given.
DEFAULT_EVERY = 60.0
#: Most generations a state may count: more than a day of the fastest searches (a
#: generation takes tens of microseconds at least), so a larger count is a damaged file.
MAX_GENERATION = 10**9
#: The ``phase`` of a state saved during a run-priced search's mirrored first search
#: (:func:`tidgap.optimize.windowed_driver.mirrored_first_search`).
MIRRORED_PHASE = "mirrored"
#: The ``phase`` of a state saved while a windowed search anneals after its GA
#: (:mod:`tidgap.optimize.anneal_checkpoint`).
ANNEAL_PHASE = "anneal"


def problem_digest(problem: Problem) -> str:
    """SHA-256 of the problem's canonical JSON (sorted keys)."""
    document = problem.model_dump(mode="json", exclude_none=True)
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()


class Prepared(Protocol):
    """A prepared search (:class:`~tidgap.optimize.flush_driver.FlushRun`,
    :class:`~tidgap.optimize.windowed_run.WindowedRun`)."""

    problem: Problem
    optimizer: Any
    stop: StopRule
    first: tuple[int, int]
    flush_plan: Plan | None
    first_cut: bool

    def report(self) -> Callable | None: ...


@dataclass(frozen=True)
class SearchIdentity:
    """What must match for a state to resume a search: the family and the options that
    shape the populations and their draws."""

    schedule: str
    seed: int
    population: int
    backend: str
    same_partition: bool = False
    backward: str = FREE
    memory_limit: str | int | None = None
    max_microbatches: int | None = None
    pricing: str = MODEL_PRICING

    def as_dict(self) -> dict[str, Any]:
        """The fields, for the state's ``meta``."""
        return dict(vars(self))


def _shown(value: Any) -> str:
    """A search setting as an error shows it: ``unset`` for ``None`` (no limit, no width
    given), else Python's repr (``'1f1b'``, ``16``)."""
    return "unset" if value is None else repr(value)


@dataclass(frozen=True)
class SavedState:
    """A state file as read: its ``meta`` and ``arrays``, and where it came from."""

    source: str
    meta: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(repr=False)

    def check(self, problem: Problem, identity: SearchIdentity) -> None:
        """:class:`InputError` (naming the file and field) unless this state belongs to
        ``problem`` and a search with ``identity``."""
        if self.meta.get("digest") != problem_digest(problem):
            raise InputError("was saved for another problem", ("digest",), source=self.source)
        for name, value in identity.as_dict().items():
            # A field newer than the state file: its default (what the search then did).
            saved = self.meta.get(name, getattr(SearchIdentity, name, None))
            if name == "backend" and saved == "auto":  # older files: the name as given
                continue
            if saved != value:
                raise InputError(
                    f"was saved with {name} {_shown(saved)}, not {_shown(value)}",
                    (name,),
                    source=self.source,
                )

    def first_search(self, problem: Problem) -> tuple[Plan, int, int] | None:
        """A windowed search's first search (flush, or mirrored windowed): its plan,
        generations, evaluations."""
        first = self.meta.get("first_search")
        if first is None:
            return None
        try:
            plan = Plan.model_validate(first["plan"])
        except ValidationError as error:
            found = input_error_from(error)
            raise InputError(
                f"is not a plan record ({found.message})",
                ("first_search", "plan", *found.path),
                source=self.source,
            ) from None
        except (KeyError, TypeError) as error:
            raise InputError(
                f"is not a plan record ({error})", ("first_search",), source=self.source
            ) from None
        try:
            check_plan(plan, problem)
            counts = int(first["generations"]), int(first["evaluations"])
            if min(counts) < 0:
                raise ValueError("negative counts")
            return plan, *counts
        except (KeyError, TypeError, ValueError, OverflowError) as error:
            raise InputError(
                f"is not a plan record ({error})", ("first_search",), source=self.source
            ) from None

    @property
    def phase(self) -> str | None:
        """The search's phase it was saved in: ``None`` (its GA), :data:`MIRRORED_PHASE`
        or :data:`ANNEAL_PHASE`."""
        phase = self.meta.get("phase")
        if phase not in (None, MIRRORED_PHASE, ANNEAL_PHASE):
            raise InputError(
                f"is not a phase tidgap saves ({phase!r})", ("phase",), source=self.source
            )
        return phase

    def where(self) -> str:
        """Where the saved search stood, in words (for the note of a resume that took it)."""
        generation = self._counters()["generation"]
        mirrored = self.phase == MIRRORED_PHASE
        if "anneal" in self.meta:  # its record checked by the resume
            step = self.meta["anneal"]["step"]
            whose = "its mirrored first search's" if mirrored else "its"
            return f"step {step} of {whose} annealing, after {generation} generations"
        return f"generation {generation} of {'its mirrored first search' if mirrored else 'its GA'}"

    def generations_run(self, problem: Problem) -> int:
        """Generations the saved search had run: its first search's and its GA's."""
        first = self.first_search(problem)
        return (0 if first is None else first[1]) + self._counters()["generation"]

    def _counters(self) -> dict[str, int]:
        """The saved ``counters``, checked (:func:`_counters`)."""
        with self.fitting():
            return _counters(self.meta["counters"])

    def restore(self, optimizer: Any) -> None:
        """Put this state into ``optimizer`` (built by the same setup)."""
        with self.fitting():
            for name, value in _counters(self.meta["counters"]).items():
                setattr(optimizer.counters, name, value)
            optimizer.restore_arrays(self.arrays)  # after the counters, which it checks
            draws = int(self.meta["draws"])
            if not 0 <= draws < 2**64:
                raise ValueError(f"draws {draws} out of range")
            optimizer.rng.draws = draws
            optimizer.rescore()  # the scores from the restored genes, with today's fitness

    @contextmanager
    def fitting(self) -> Iterator[None]:
        """What this state lacks or holds wrong for a search, as one :class:`InputError`."""
        try:
            yield
        except KeyError as error:
            raise InputError(
                f"does not fit this search (it has no {error.args[0]!r})", source=self.source
            ) from None
        except (TypeError, ValueError, OverflowError, IndexError) as error:
            raise InputError(f"does not fit this search ({error})", source=self.source) from None


def _counters(saved: Any) -> dict[str, int]:
    """The saved ``counters``, checked: integers, none negative, ``generation`` at most
    :data:`MAX_GENERATION` (the annealing after a resumed search takes steps in proportion)
    and ``since_improvement`` at most ``generation``. :class:`ValueError` otherwise."""
    if not isinstance(saved, dict):
        raise ValueError("counters is not an object")
    counters = {}
    for name in ("generation", "evaluations", "since_improvement", "best"):
        value = saved[name]
        if not is_integer(value) or value < 0:
            raise ValueError(f"counters.{name} {value!r} is not a count")
        counters[name] = value
    if counters["generation"] > MAX_GENERATION:
        raise ValueError(f"counters.generation {counters['generation']} above {MAX_GENERATION}")
    if counters["since_improvement"] > counters["generation"]:
        raise ValueError("counters.since_improvement above counters.generation")
    return counters


def state_meta(run: Prepared, identity: SearchIdentity, phase: str | None = None) -> dict[str, Any]:
    """The ``meta`` of ``run``'s state now (before any pending ask), in ``phase`` of the
    search with ``identity`` (``run`` is that phase's)."""
    optimizer = run.optimizer
    counters = optimizer.counters
    asked = optimizer.asked
    first = None
    if not SCHEDULES[identity.schedule].separable and run.flush_plan is not None:
        first = {
            "plan": run.flush_plan.document(),
            "generations": run.first[0],
            "evaluations": run.first[1],
        }
    return {
        "format": STATE_FORMAT,
        "digest": problem_digest(run.problem),
        **identity.as_dict(),
        "draws": optimizer.rng.draws if asked is None else asked.draws,
        "counters": {
            "generation": counters.generation,
            "evaluations": counters.evaluations,
            "since_improvement": counters.since_improvement,
            "best": counters.best,
        },
        "first_search": first,
        "phase": phase,
    }


def current_state(run: Prepared, identity: SearchIdentity, phase: str | None = None) -> SavedState:
    """``run``'s state now, in memory (what :func:`save_state` writes)."""
    return SavedState(
        "the optimizer's state", state_meta(run, identity, phase), run.optimizer.state_arrays()
    )


def save_state(
    path: str | os.PathLike[str],
    run: Prepared,
    identity: SearchIdentity,
) -> None:
    """Write ``run``'s state (its GA's) to ``path`` atomically (:mod:`tidgap.outputs.atomic`);
    :class:`InputError` where a signal cut its first search short (:func:`require_resumable`)."""
    require_resumable(run)
    write_state(path, current_state(run, identity))


def require_resumable(run: Prepared) -> None:
    """:class:`InputError` where a signal stopped ``run``'s flush first search (a windowed
    search's): that search holds no state, and one saved after it would resume with it cut
    short, another plan than the unbroken search's (the first search is short: run the
    search again)."""
    if run.first_cut:
        raise InputError(
            "a signal stopped the search in its first (flush) search, which no state "
            "holds: run the search again",
            source="path",
        )


def write_state(path: str | os.PathLike[str], state: SavedState) -> None:
    """Write ``state`` to ``path`` atomically (:mod:`tidgap.outputs.atomic`)."""

    def produce(temporary: Path) -> None:
        buffer = io.BytesIO()
        np.savez_compressed(buffer, meta=np.array(json.dumps(state.meta)), **state.arrays)
        temporary.write_bytes(buffer.getvalue())

    replace_atomically(path, produce)


#: What NumPy's reader raises on a damaged archive (flipped bits: a bad deflate stream, an
#: unknown compression method, a broken array header; ``ValueError`` covers most).
DAMAGED = (
    OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, NotImplementedError,
    tokenize.TokenError,
)  # fmt: skip


def load_state(path: str | os.PathLike[str]) -> SavedState:
    """Read a state file; :class:`InputError` naming the file (and field) when it cannot
    be read, is not a state archive, or is of another format or version."""
    source = str(path)
    require_file_name(source)
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except FileNotFoundError:
        raise InputError("no such file", source=source) from None
    except (*DAMAGED, MemoryError) as error:
        why = _unreadable(error)
        raise InputError(f"is not a tidgap state file ({why})", source=source) from None
    if "meta" not in arrays:
        raise InputError("is not a tidgap state file (no meta)", source=source)
    meta = parse_json(str(arrays.pop("meta")), source, ("meta",))
    if not isinstance(meta, dict) or meta.get("format") != STATE_FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise InputError(
            f"is format {found!r}, this tidgap reads {STATE_FORMAT!r}", ("format",), source=source
        )
    return SavedState(source, meta, arrays)


def _unreadable(error: Exception) -> str:
    """Why ``np.load`` could not read a file, in words (not Python's exception)."""
    if isinstance(error, EOFError):
        return "empty"
    if isinstance(error, MemoryError):
        return "an array larger than the memory"
    if isinstance(error, zipfile.BadZipFile):
        return f"not a whole zip archive: {error}"
    if isinstance(error, (zlib.error, NotImplementedError)):
        return f"a damaged zip archive: {error}"
    if isinstance(error, OSError):
        return error.strerror or str(error)
    return "not a NumPy archive of plain arrays"  # pickled objects, a bad .npy header


class StateNotSaved(UserWarning):
    """A checkpoint could not be written (a full disk, a quota): the search goes on, and
    the file keeps the last state saved (writes are atomic)."""


@dataclass
class Checkpoint:
    """Where and how often a search saves its state: ``path``, every ``every`` seconds and
    at the end, for a search with ``identity`` (a write that fails is a
    :class:`StateNotSaved` warning, once while it fails alike, not the search's end: until
    2026-12-07 a full disk ended a long search and lost its plan); the ``phase`` it is in
    (``None``: its GA; :meth:`in_phase` sets another). Once a signal stopped a phase other
    than the GA, it is ``closed``: the state saved is that phase's, which a resume
    continues, and the phases after it (which the signal stops at once) save nothing over
    it."""

    path: str
    identity: SearchIdentity
    every: float = DEFAULT_EVERY
    last: float = field(default_factory=time.monotonic)
    phase: str | None = None
    closed: bool = False
    #: The last write's failure, warned once (until a write succeeds or fails otherwise).
    failure: str | None = None

    @property
    def is_due(self) -> bool:
        """Whether ``every`` seconds passed since the last save."""
        return time.monotonic() - self.last >= self.every

    def due(self, run: Prepared) -> None:
        """Save if ``every`` seconds passed since the last save."""
        if self.is_due:
            self.save(run)

    def save(self, run: Prepared) -> None:
        """Save ``run``'s state now (unless closed; a run whose first search a signal cut
        short closes it: :func:`require_resumable`)."""
        self.closed |= run.first_cut
        self.write(current_state(run, self.identity, self.phase))

    def write(self, state: SavedState) -> None:
        """Write ``state`` now (unless closed)."""
        if not self.closed:
            try:
                write_state(self.path, state)
                self.failure = None
            except InputError as error:
                if str(error) != self.failure:
                    self.failure = str(error)
                    warnings.warn(
                        StateNotSaved(
                            f"checkpoint not saved: {error} (the file keeps the last state "
                            "saved; the search goes on)"
                        ),
                        stacklevel=2,
                    )
        self.last = time.monotonic()

    def signalled(self) -> None:
        """A signal stopped the search in this phase: one other than the GA's closes."""
        self.closed |= self.phase is not None

    @contextmanager
    def in_phase(self, phase: str) -> Iterator[Checkpoint]:
        """This checkpoint saving a run of ``phase`` (then the GA's again)."""
        self.phase = phase
        try:
            yield self
        finally:
            self.phase = None


def drive(run: Prepared, checkpoint: Checkpoint | None = None) -> str:
    """Run ``run``'s generations, checkpointing as asked and at the end (an interrupted
    search too; a phase a signal stopped closes the checkpoint); the stop reason."""
    after = None if checkpoint is None else (lambda: checkpoint.due(run))
    reason = run_generations(run.optimizer, run.stop, run.report(), after)
    if checkpoint is not None:
        checkpoint.save(run)
        if reason in STOP_SIGNALS.values():
            checkpoint.signalled()
    return reason
