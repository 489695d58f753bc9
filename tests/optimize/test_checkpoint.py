"""Checkpoint and resume: G1 generations then G - G1 resumed give the plan of G; state
files are versioned and rejected cleanly."""

from __future__ import annotations

import re
import zipfile

import numpy as np
import pytest

import tidgap
from tests.support.backends import install_fake_cupy
from tests.support.state_files import rewrite_array, rewrite_arrays, rewrite_meta
from tidgap.model.errors import InputError
from tidgap.optimize.checkpoint import STATE_FORMAT, load_state


def resumed(tmp_path, problem, total: int, first: int, **options):
    """(full search, resumed search, state file): ``total`` generations split at ``first``."""
    full = tidgap.search(problem, generations=total, **options)
    path = tmp_path / "search.state"
    tidgap.search(problem, generations=first, checkpoint=path, **options)
    rest = tidgap.search(problem, generations=total - first, resume=path, **options)
    return full, rest, path


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_flush_resume_equals_one_search(tmp_path, backend):
    problem = tidgap.load_problem("example:vgg16")
    options = dict(schedule="flush", seed=3, population=32, backend=backend)
    full, rest, _ = resumed(tmp_path, problem, 200, 80, **options)
    assert rest.plan == full.plan
    assert (rest.generations, rest.evaluations) == (full.generations, full.evaluations)


def test_windowed_resume_equals_one_search(tmp_path):
    # G1 >= 1200: the first, flush search takes min(G/4, 300) generations in both runs.
    problem = tidgap.load_problem("example:tiny-2")
    options = dict(schedule="windowed", seed=5, population=16, backend="numba")
    full, rest, _ = resumed(tmp_path, problem, 1400, 1250, memory_limit="1f1b", **options)
    assert rest.plan == full.plan
    assert (rest.generations, rest.evaluations) == (full.generations, full.evaluations)


def test_resume_through_the_cupy_stand_in(tmp_path, monkeypatch):
    install_fake_cupy(monkeypatch)
    problem = tidgap.load_problem("example:tiny-2")
    options = dict(schedule="flush", seed=1, population=16, backend="cuda")
    full, rest, _ = resumed(tmp_path, problem, 60, 25, **options)
    assert rest.plan == full.plan


def test_state_file_round_trips_and_names_its_format(tmp_path):
    problem = tidgap.load_problem("example:tiny-2")
    path = tmp_path / "s.state"
    tidgap.search(problem, schedule="flush", generations=5, population=16, checkpoint=path)
    state = load_state(path)
    assert state.meta["format"] == STATE_FORMAT
    assert state.meta["counters"]["generation"] == 5
    assert state.where() == "generation 5 of its GA"
    assert state.arrays["forward_genes"].shape[0] == 16


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda p: p.write_bytes(b"not a zip"), "not a NumPy archive of plain arrays"),
        (lambda p: p.write_bytes(b""), r"is not a tidgap state file \(empty\)"),
        (lambda p: rewrite_meta(p, lambda m: m.update(format="tidgap.state/0")), "format"),
        (lambda p: rewrite_meta(p, lambda m: m.update(seed=99)), "seed"),
        (lambda p: rewrite_meta(p, lambda m: m.update(digest="x")), "another problem"),
        (lambda p: rewrite_meta(p, lambda m: m.update(phase="ga")), "not a phase tidgap"),
        # only a run-priced windowed search runs a mirrored first search
        (lambda p: rewrite_meta(p, lambda m: m.update(phase="mirrored")), "phase: was saved"),
    ],
)
def test_bad_state_files_are_refused(tmp_path, damage, message):
    problem = tidgap.load_problem("example:tiny-2")
    path = tmp_path / "s.state"
    options = dict(schedule="flush", population=16, seed=0)
    tidgap.search(problem, generations=5, checkpoint=path, **options)
    damage(path)
    with pytest.raises(InputError, match=message) as caught:
        tidgap.search(problem, generations=5, resume=path, **options)
    assert str(path) in str(caught.value)


def _counters(**changes):
    return lambda p: rewrite_meta(p, lambda m: m["counters"].update(changes))


def _meta_text(path, text):
    """Replace the meta string of the state at ``path`` with ``text`` as it is."""
    rewrite_arrays(path, lambda arrays: arrays.update(meta=np.array(text)))


def _huge_array(path):
    """A state whose one array claims 2**40 doubles in its header."""
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (1099511627776,), }"
    header += " " * (117 - len(header)) + "\n"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(
            "meta.npy", b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode()
        )


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (_counters(generation=-1), "counters.generation -1 is not a count"),
        (_counters(evaluations=True), "counters.evaluations True is not a count"),
        (_counters(best=1.5), "counters.best 1.5 is not a count"),
        (_counters(generation=10**15), "counters.generation 1000000000000000 above"),
        (_counters(generation=3, since_improvement=4), "since_improvement above"),
        (lambda p: rewrite_meta(p, lambda m: m.update(counters=[1])), "counters is not an"),
        (lambda p: _meta_text(p, "[" * 100_000 + "]" * 100_000), "meta: nested deeper than 64"),
        (lambda p: _meta_text(p, '{"format": NaN}'), "meta.format: "),
        (lambda p: _meta_text(p, "{"), "meta: not valid JSON"),
        (_huge_array, "is not a tidgap state file (an array larger than the memory)"),
    ],
)
def test_damaged_meta_is_one_error(tmp_path, damage, message):
    """Counters, meta JSON and array headers a search never writes: an :class:`InputError`
    naming the file, never a hang, a traceback or a huge allocation."""
    problem = tidgap.load_problem("example:tiny-2")
    path = tmp_path / "s.state"
    options = dict(schedule="windowed", population=16, seed=0)
    tidgap.search(problem, generations=2, checkpoint=path, **options)
    damage(path)
    with pytest.raises(InputError, match=re.escape(message)) as caught:
        tidgap.search(problem, generations=2, resume=path, **options)
    assert str(caught.value).startswith(f"{path}: ")


def test_truncated_state_file_is_refused(tmp_path):
    problem = tidgap.load_problem("example:tiny-2")
    path = tmp_path / "s.state"
    tidgap.search(problem, schedule="flush", generations=5, population=16, checkpoint=path)
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    assert names
    with pytest.raises(InputError, match="not a whole zip archive: File is not a zip file"):
        load_state(path)
    path.unlink()
    path.mkdir()
    with pytest.raises(InputError, match=r"state file \(Is a directory\)"):
        load_state(path)


def test_flipped_bits_are_refused_in_one_line_or_harmless(tmp_path):
    """Bits flipped anywhere in a state file (a damaged disk, a bad copy): the resume either
    refuses it naming the file (a bad deflate stream was a zlib.error traceback) or, where
    the bits were in fields nothing reads, resumes."""
    problem = tidgap.load_problem("example:tiny-2")
    path = tmp_path / "s.state"
    options = dict(schedule="flush", population=16)
    tidgap.search(problem, generations=3, checkpoint=path, **options)
    whole = path.read_bytes()
    rng = np.random.default_rng(0)
    refused = 0
    for _ in range(150):
        damaged = bytearray(whole)
        for at in rng.integers(0, len(whole), size=rng.integers(1, 4)):
            damaged[at] ^= 1 << int(rng.integers(8))
        path.write_bytes(bytes(damaged))
        try:
            tidgap.search(problem, generations=1, resume=path, **options)
        except InputError as error:
            assert str(error).startswith(f"{path}: ") and "\n" not in str(error)
            refused += 1
    assert refused > 100


@pytest.mark.parametrize(
    ("schedule", "name"),
    [("flush", "forward_genes"), ("flush", "backward_genes"), ("windowed", "island0_forward")],
)
@pytest.mark.parametrize(
    "change",
    [
        lambda a: a * 3,  # rows that no longer sum to the batch
        lambda a: -a,
        lambda a: a.astype(np.float64) + 0.5,
        lambda a: a[:-1],
    ],
)
def test_damaged_populations_are_refused(tmp_path, schedule, name, change):
    problem = tidgap.load_problem("example:tiny-2")
    path = tmp_path / "s.state"
    options = dict(schedule=schedule, population=16, seed=0, backend="numpy")
    tidgap.search(problem, generations=3, checkpoint=path, **options)
    rewrite_array(path, name, change)
    with pytest.raises(InputError, match="does not fit this search") as caught:
        tidgap.search(problem, generations=3, resume=path, **options)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize(
    ("schedule", "name"), [("flush", "forward_genes"), ("windowed", "island0_forward")]
)
def test_a_population_of_floats_is_named_so(tmp_path, schedule, name):
    problem = tidgap.load_problem("example:tiny-2")
    path = tmp_path / "s.state"
    options = dict(schedule=schedule, population=16, seed=0, backend="numpy")
    tidgap.search(problem, generations=3, checkpoint=path, **options)
    rewrite_array(path, name, lambda a: a.astype(np.float64))
    with pytest.raises(InputError, match=r"float64 \(\d+, 2, \d+\), not integers \(") as caught:
        tidgap.search(problem, generations=3, resume=path, **options)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda a: a.astype(complex), r"complex128 \(2,\), not integers \(2,\)"),
        (lambda a: a * 0 - 1, r"\[-1, -1\], not counts >= 0"),
        (
            lambda a: a * [1, 0] + [0, 1000000],
            r"1000000 generations since it improved, more than the \d+ run",
        ),
    ],
)
def test_an_islands_progress_that_is_not_counts_is_refused(tmp_path, change, message):
    """A complex one was cast to int with a ComplexWarning leaking to stderr; one that
    counts more generations since it improved than the search ran was taken (another plan
    than the unbroken search's, silently)."""
    problem = tidgap.load_problem("example:tiny-2")
    path = tmp_path / "s.state"
    options = dict(population=16, seed=0, backend="numpy")
    tidgap.search(problem, generations=3, checkpoint=path, **options)
    rewrite_array(path, "island0_progress", change)
    with pytest.raises(InputError, match="island 0's progress: " + message):
        tidgap.search(problem, generations=3, resume=path, **options)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda first: first["plan"].update(forward="x"), "first_search.plan.forward: is not a"),
        (lambda first: first.pop("plan"), "first_search: is not a plan record ('plan')"),
        (lambda first: first.update(generations=-1), "first_search: is not a plan record (neg"),
    ],
)
def test_a_damaged_first_search_record_is_named_by_its_field(tmp_path, change, expected):
    """Its plan's fields as a JSON path, not pydantic's own report."""
    problem = tidgap.load_problem("example:tiny-2")
    path = tmp_path / "s.state"
    tidgap.search(problem, generations=3, checkpoint=path, population=16, seed=0)
    rewrite_meta(path, lambda meta: change(meta["first_search"]))
    with pytest.raises(InputError) as caught:
        tidgap.search(problem, generations=3, resume=path, population=16, seed=0)
    assert expected in str(caught.value) and "pydantic" not in str(caught.value)


def test_state_files_are_compressed_and_uncompressed_ones_still_resume(tmp_path):
    """Written deflated (a deep problem's 118 MB state took 1.1 MB); files written
    uncompressed, as before 2026-12-05, resume the same."""
    problem = tidgap.load_problem("example:tiny-2")
    options = dict(schedule="windowed", population=16, seed=4, backend="numpy")
    path = tmp_path / "s.state"
    tidgap.search(problem, generations=3, checkpoint=path, **options)
    with zipfile.ZipFile(path) as archive:
        assert {i.compress_type for i in archive.infolist()} == {zipfile.ZIP_DEFLATED}
    plain = tmp_path / "plain.state"
    with np.load(path) as archive, plain.open("wb") as file:
        np.savez(file, **{name: archive[name] for name in archive.files})
    results = [tidgap.search(problem, generations=2, resume=p, **options) for p in (path, plain)]
    assert results[0].plan == results[1].plan


#: For each field of a search's identity, a value other than the saved state's below.
OTHER_IDENTITY = {
    "schedule": "flush",
    "seed": 4,
    "population": 18,
    "backend": "numpy",
    "same_partition": True,
    "backward": "mirrored",
    "memory_limit": "1f1b",
    "max_microbatches": 7,
    "pricing": "run",
}


@pytest.mark.parametrize("field", sorted(OTHER_IDENTITY))
def test_a_state_resumes_only_the_search_it_was_saved_by(tmp_path, field):
    """Every field of the identity is checked (only a few had a test: a state saved under
    another memory limit, population or schedule could have resumed unnoticed)."""
    import dataclasses

    from tidgap.optimize.checkpoint import SearchIdentity

    assert set(OTHER_IDENTITY) == {f.name for f in dataclasses.fields(SearchIdentity)}
    problem = tidgap.load_problem("example:tiny-2")
    path = tmp_path / "search.state"
    tidgap.search(problem, generations=2, seed=3, population=16, backend="numba", checkpoint=path)
    saved = load_state(path)
    identity = SearchIdentity(**{name: saved.meta[name] for name in OTHER_IDENTITY})
    saved.check(problem, identity)  # its own search: accepted
    other = dataclasses.replace(identity, **{field: OTHER_IDENTITY[field]})
    with pytest.raises(InputError, match=f"was saved with {field} ") as refused:
        saved.check(problem, other)
    assert refused.value.path == (field,)


def test_a_signal_in_the_flush_first_search_saves_no_state(tmp_path):
    """A windowed search's flush first search holds no state: stopped there by a signal,
    the search saved a state whose resume skipped the rest of that search (another plan
    than the unbroken search's, silently). It now saves nothing; stopped in its GA, it
    saves as before."""
    problem = tidgap.load_problem("example:tiny-2")
    options = dict(generations=400, population=16, backend="numpy", seed=1)
    early = tmp_path / "early.state"
    stopped = tidgap.search(problem, checkpoint=early, interrupted=lambda: "SIGINT", **options)
    assert stopped.interrupted and not early.exists()
    calls = []

    def later() -> str | None:  # past the first search's 100 generations
        calls.append(1)
        return "SIGINT" if len(calls) > 400 else None

    late = tmp_path / "late.state"
    stopped = tidgap.search(problem, checkpoint=late, interrupted=later, **options)
    assert stopped.interrupted and load_state(late).first_search(problem) is not None


def test_saving_to_an_empty_path_is_refused_as_such():
    """``Optimizer.save("")`` said ``cannot write: Is a directory`` (the working folder)."""
    optimizer = tidgap.Optimizer(tidgap.load_problem("example:tiny-2"), population=16)
    with pytest.raises(InputError, match=r"path: no file name \(an empty argument\)"):
        optimizer.save("")


def test_an_optimizer_stopped_in_its_flush_first_search_saves_no_state(tmp_path):
    """``Optimizer.save`` wrote the state a checkpoint no longer writes there (its
    first_search cut short: 0 generations of 100), which a resume continues to another
    plan than the unbroken search's: refused in one line."""
    stopping = tidgap.Stopping(generations=400, interrupted=lambda: "SIGINT")
    problem = tidgap.load_problem("example:tiny-2")
    optimizer = tidgap.Optimizer(problem, population=16, seed=1, stopping=stopping)
    with pytest.raises(InputError, match="path: a signal stopped the search in its first"):
        optimizer.save(tmp_path / "s.state")
    assert not (tmp_path / "s.state").exists()


def test_a_checkpoint_that_fails_to_write_warns_once_and_the_search_goes_on(
    tmp_path, monkeypatch
) -> None:
    """A full disk at a periodic save ended the search (exit 2) and lost its plan; now one
    warning while the failure lasts (the file keeps the last state saved), and the plan
    and the state after the disk recovers are written."""
    from tests.support.cli_helpers import describe, run_cli
    from tidgap.optimize import checkpoint as module

    written = module.write_state
    calls: list[int] = []

    def full_twice(path, state) -> None:
        calls.append(1)
        if len(calls) <= 2 or len(calls) == 5:  # full, recovered, full again
            raise InputError("cannot write: No space left on device", source=str(path))
        written(path, state)

    monkeypatch.setattr(module, "write_state", full_twice)
    state, out = tmp_path / "s.state", tmp_path / "plan.json"
    args = ["search", "example:tiny-2", "--generations", "30", "--checkpoint", str(state)]
    result = run_cli(*args, "--checkpoint-every", "1e-9", "--out", str(out), "-q")
    assert result.exit_code == 0, describe(result)
    warned = [line for line in result.stderr.splitlines() if "warning" in line]
    assert warned == 2 * [  # once a failure: the second after a recovery is shown too
        f"tidgap: warning: checkpoint not saved: {state}: cannot write: No space left on "
        "device (the file keeps the last state saved; the search goes on)"
    ]
    assert len(calls) > 5 and out.exists()
    assert load_state(state).meta["counters"]["generation"] > 0  # saved once the disk recovered
    with pytest.warns(module.StateNotSaved, match="checkpoint not saved: .*No space left"):
        calls.clear()
        tidgap.search(tidgap.load_problem("example:tiny-2"), generations=3, checkpoint=state)
