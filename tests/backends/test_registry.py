"""The registry of backends: choosing one by preference or device, saying why one cannot
run, and no module outside the registry knowing a backend by its name."""

from __future__ import annotations

import re
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

import tidgap.kernels
from tests.support.backends import install_fake_cupy
from tidgap.backends import BACKENDS, UnusableBackend, default_backend, first_usable, load
from tidgap.cli import cli

ROOT = Path(__file__).parents[2]
#: A comparison with a backend's name, either way round (``backend == "cuda"``).
NAME_TEST = re.compile(
    r"""[!=]=\s*["'](?:{names})["']|["'](?:{names})["']\s*[!=]=""".format(
        names="|".join(map(re.escape, BACKENDS))
    )
)
#: Outside the registry, what may compare with these names: the profiler's PyTorch
#: devices (``device.type == "cuda"``), which are not backends.
ALLOWED = ("tidgap/backends/", "tidgap/profiling/")


def pretend(monkeypatch: pytest.MonkeyPatch, names: list[str], usable: bool) -> None:
    """Make backends ``names`` usable, or unusable each saying ``"<name> is off"``."""
    for name in names:
        reason = None if usable else f"{name} is off"
        record = replace(BACKENDS[name], unusable_reason=lambda reason=reason: reason)
        monkeypatch.setitem(BACKENDS, name, record)


def unusable(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """Make backends ``names`` unusable (see :func:`pretend`)."""
    pretend(monkeypatch, list(names), usable=False)


def test_no_module_outside_the_registry_tests_a_backend_by_name() -> None:
    sources = [*ROOT.glob("tidgap/**/*.py"), *ROOT.glob("kernels/*.py")]
    sources += ROOT.glob("fallback_cpu/*.py")
    assert len(sources) > 30
    offenders = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sources
        if not path.relative_to(ROOT).as_posix().startswith(ALLOWED)
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if NAME_TEST.search(line)
    ]
    assert offenders == []
    assert NAME_TEST.search('if backend == "cuda":') and NAME_TEST.search("'numpy' != b")


def test_every_record_names_its_code_and_devices() -> None:
    for name, record in BACKENDS.items():
        assert record.name == name and record.device in ("cpu", "gpu")
        assert record.evaluators, name
        for spec in (
            *record.evaluators.values(),
            *filter(
                None, [record.breeder, record.joint_breeder, record.joint_mutator, record.repair]
            ),
            *record.cached_loops,
        ):
            module, attribute = spec.split(":")
            assert module.startswith("tidgap.") and attribute.isidentifier(), spec
    assert load("tidgap.backends:first_usable") is first_usable


def test_the_default_is_the_first_usable_in_order_of_preference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    order = list(BACKENDS)
    pretend(monkeypatch, order, usable=True)
    for count in range(len(order)):
        unusable(monkeypatch, *order[:count])
        assert default_backend() == order[count]
    unusable(monkeypatch, *order)
    with pytest.raises(UnusableBackend, match=f"^no usable {BACKENDS[order[0]].title}: "):
        default_backend()


def test_a_device_choice_takes_its_first_usable_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    cpus = [name for name, record in BACKENDS.items() if record.device == "cpu"]
    unusable(monkeypatch, "cuda", cpus[0])
    assert first_usable("cpu").name == cpus[1]
    with pytest.raises(UnusableBackend, match=r"^no usable GPU: cuda is off$"):
        first_usable("gpu")
    with pytest.raises(ValueError, match="tpu"):
        first_usable("tpu")


@pytest.mark.parametrize(
    ("options", "source", "message"),
    [
        (["--gpu"], "--gpu", "no usable GPU: cuda is off"),
        (["--backend", "cuda"], "--backend", "no usable GPU: cuda is off"),
        (["--backend", "numba"], "--backend", "no usable Numba: numba is off"),
        (["--cpu"], "--cpu", "no usable Numba: numba is off"),
    ],
)
def test_search_on_an_unusable_backend_exits_2_saying_why(
    monkeypatch: pytest.MonkeyPatch, options: list[str], source: str, message: str
) -> None:
    unusable(monkeypatch, *BACKENDS)
    result = CliRunner().invoke(cli, ["search", "example:tiny-2", *options])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == f"tidgap: error: {source}: {message}\n"


def test_cpu_falls_back_to_the_next_cpu_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    unusable(monkeypatch, "numba")
    result = CliRunner().invoke(
        cli, ["search", "example:tiny-2", "--cpu", "--generations", "2", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert '"backend": "numpy"' in result.stdout


def test_fake_cupy_leaves_no_launcher_behind() -> None:
    """A test on the CuPy stand-in puts back the launcher that was there (or none), so a later
    test on a real GPU in the same process never gets the stand-in's launcher."""
    before = sys.modules.get("tidgap.kernels.launcher")
    with pytest.MonkeyPatch.context() as patch:
        install_fake_cupy(patch)
        import tidgap.kernels.launcher as launcher

        assert launcher.cupy is sys.modules["cupy"]
        assert launcher is not before
    assert sys.modules.get("tidgap.kernels.launcher") is before
    assert getattr(tidgap.kernels, "launcher", None) is before
