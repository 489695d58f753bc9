"""``tidgap bench``: the tidgap.bench/1 document (docs/files.md), the text table, the memory
budget, the CUDA backend through the CuPy stand-in, and bad options (exit 2, one line)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.backends import install_fake_cupy
from tests.support.cli_helpers import describe, json_output, run_cli
from tidgap.analysis.throughput import FORMAT, footprint
from tidgap.analysis.workload import STAGES, WIDTH
from tidgap.backends import BACKENDS

FAMILIES = ["flush", "windowed"]
CPU_BACKENDS = [name for name, record in BACKENDS.items() if record.device == "cpu"]
TINY = ["--population", "8,24", "--repeats", "3", "--warmup", "1"]

#: ``tidgap.bench/1``: key -> allowed types, per object.
MACHINE = {
    "cpu": (str,),
    "python": (str,),
    "numpy": (str,),
    "numba": (str, type(None)),
    "numba_threads": (int, type(None)),
    "cupy": (str, type(None)),
    "gpu": (str, type(None)),
    "peak_bandwidth": (float, type(None)),
}
PROBLEM = {"name": (str,), "stages": (int,), "batch_size": (int,), "unit": (int,), "width": (int,)}
NUMBER = (int, float)
ROW = {
    "backend": (str,),
    "family": (str,),
    "population": (int,),
    "median_s": NUMBER,
    "min_s": NUMBER,
    "max_s": NUMBER,
    "evaluations_per_second": NUMBER,
    "bytes_per_evaluation": (int,),
    "bandwidth_share": (*NUMBER, type(None)),
    "skipped": (type(None),),
}
SKIPPED_ROW = {key: (type(None),) for key in ROW} | {
    "backend": (str,),
    "family": (str,),
    "population": (int,),
    "skipped": (str,),
}


def check_object(value: Any, schema: dict[str, tuple[type, ...]], where: str) -> None:
    """``value`` is an object with exactly ``schema``'s keys, each of an allowed type."""
    assert isinstance(value, dict) and set(value) == set(schema), where
    for key, types in schema.items():
        assert isinstance(value[key], types) and not isinstance(value[key], bool), (where, key)


def check_document(document: Any) -> None:
    """``document`` follows ``tidgap.bench/1``; timed rows' numbers are consistent."""
    keys = {"format", "tidgap", "date", "machine", "problem", "repeats", "warmup"}
    assert set(document) == keys | {"unusable", "rows"}
    assert document["format"] == FORMAT
    assert isinstance(document["tidgap"], str) and document["date"].endswith("+00:00")
    check_object(document["machine"], MACHINE, "machine")
    check_object(document["problem"], PROBLEM, "problem")
    assert document["repeats"] >= 1 and document["warmup"] >= 0
    for item in document["unusable"]:
        check_object(item, {"backend": (str,), "reason": (str,)}, "unusable")
        assert item["backend"] in BACKENDS and item["reason"]
    for row in document["rows"]:
        if row["skipped"] is not None:
            check_object(row, SKIPPED_ROW, "skipped row")
            continue
        check_object(row, ROW, "row")
        assert 0 < row["min_s"] <= row["median_s"] <= row["max_s"]
        assert row["evaluations_per_second"] == pytest.approx(row["population"] / row["median_s"])
        assert row["bytes_per_evaluation"] > 2 * STAGES * 4  # two chromosomes at least
        if BACKENDS[row["backend"]].device == "cpu":
            assert row["bandwidth_share"] is None


def test_json_on_the_cpu_backends() -> None:
    document = json_output(run_cli("bench", *TINY, "--json"))
    check_document(document)
    assert document["problem"] == {
        "name": "bench-s8-b256",
        "stages": STAGES,
        "batch_size": 256,
        "unit": 1,
        "width": WIDTH,
    }
    assert (document["repeats"], document["warmup"]) == (3, 1)
    measured = {(r["backend"], r["family"], r["population"]) for r in document["rows"]}
    for backend in CPU_BACKENDS:
        assert {(backend, f, p) for f in FAMILIES for p in (8, 24)} <= measured
    listed = {r["backend"] for r in document["rows"]} | {u["backend"] for u in document["unusable"]}
    assert listed == set(BACKENDS)
    assert all(r["skipped"] is None for r in document["rows"])


def test_text_table_and_out_file(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    args = ["--backend", "numpy", "--schedule", "flush", "--population", "16", "--repeats", "2"]
    result = run_cli("bench", *args, "--out", str(out))
    assert result.exit_code == 0, describe(result)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("bench-s8-b256: 8 stage(s), batch_size 256, unit 1; K = 32")
    assert "evals/s" in lines[2] and "bandwidth" in lines[2]
    (row,) = [line for line in lines if line.startswith("numpy")]
    assert row.split()[:3] == ["numpy", "flush", "16"] and row.split()[-1] == "-"
    document = json.loads(out.read_text(encoding="utf-8"))
    check_document(document)
    assert [(r["backend"], r["family"], r["population"]) for r in document["rows"]] == [
        ("numpy", "flush", 16)
    ]
    assert document["unusable"] == []


def test_a_problem_file_gets_a_search_population() -> None:
    args = ["--backend", "numpy", "--population", "8", "--repeats", "1", "--json"]
    document = json_output(run_cli("bench", "example:vgg16", *args))
    check_document(document)
    assert document["problem"]["name"] == "vgg16"
    assert document["problem"]["width"] == 16  # batch 64 in units of 4: at most 16 columns
    assert {r["family"] for r in document["rows"]} == set(FAMILIES)


def test_a_population_over_the_memory_budget_is_skipped() -> None:
    budget = footprint("flush", 8, STAGES, WIDTH, 256)
    args = ["--backend", "numpy", "--schedule", "flush", "--population", "8,1048576"]
    result = run_cli("bench", *args, "--repeats", "1", "--max-memory", str(budget), "--json")
    document = json_output(result)
    check_document(document)
    small, large = document["rows"]
    assert small["skipped"] is None and small["population"] == 8
    assert large["population"] == 1048576
    assert "more than the memory budget" in large["skipped"] and "--max-memory" in large["skipped"]


def test_a_small_population_is_measured_under_a_small_budget() -> None:
    """8 individuals were skipped under 300 MB: the estimate was a whole search's (336 MB,
    mostly what every search holds besides its population)."""
    args = ["--backend", "numpy", "--schedule", "flush", "--population", "8", "--json"]
    document = json_output(
        run_cli("bench", "example:tiny-2", *args, "--repeats", "1", "--max-memory", "300MB")
    )
    (row,) = document["rows"]
    assert row["skipped"] is None and row["evaluations_per_second"] > 0


class FakeDevice:
    """``cupy.cuda.Device()`` for the stand-in: counts synchronisations, and a memory of
    1 GHz on a 1024-bit bus (peak 256 GB/s)."""

    synchronised = 0
    id = 0
    attributes = {"MemoryClockRate": 1_000_000, "GlobalMemoryBusWidth": 1024}

    def synchronize(self) -> None:
        FakeDevice.synchronised += 1


def test_the_cuda_backend_on_the_cupy_stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_cupy(monkeypatch)
    cuda = sys.modules["cupy"].cuda
    monkeypatch.setattr(cuda, "Device", FakeDevice, raising=False)
    monkeypatch.setattr(
        cuda.runtime, "getDeviceProperties", lambda _: {"name": b"Fake GPU"}, raising=False
    )
    monkeypatch.setattr(FakeDevice, "synchronised", 0)
    args = ["--backend", "cuda", "--population", "8", "--repeats", "3", "--warmup", "1"]
    document = json_output(run_cli("bench", *args, "--json"))
    check_document(document)
    assert document["machine"]["gpu"] == "Fake GPU"
    assert document["machine"]["peak_bandwidth"] == 2 * 1e9 * 1024 / 8
    assert [(r["backend"], r["family"]) for r in document["rows"]] == [
        ("cuda", f) for f in FAMILIES
    ]
    for row in document["rows"]:
        moved = row["evaluations_per_second"] * row["bytes_per_evaluation"]
        assert row["bandwidth_share"] == pytest.approx(moved / 2.56e11)
    assert FakeDevice.synchronised == 2 * (1 + 3)  # per row: after the warm-up, each timed run


def unusable_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the CUDA backend unusable, whatever this machine has."""
    record = dataclasses.replace(BACKENDS["cuda"], unusable_reason=lambda: "no device (test)")
    monkeypatch.setitem(BACKENDS, "cuda", record)


def test_an_unusable_backend_is_listed_unless_named(monkeypatch: pytest.MonkeyPatch) -> None:
    unusable_cuda(monkeypatch)
    args = ["--schedule", "flush", "--population", "8", "--repeats", "1", "--json"]
    document = json_output(run_cli("bench", *args))
    reason = "no usable GPU: no device (test)"
    assert document["unusable"] == [{"backend": "cuda", "reason": reason}]
    assert "cuda" not in {r["backend"] for r in document["rows"]}
    result = run_cli("bench", "--backend", "cuda,numpy", *args)
    assert result.exit_code == 2, describe(result)
    assert result.stderr == f"tidgap: error: --backend: {reason}\n"


@pytest.mark.parametrize(
    "args",
    [
        ["--backend", "numpy,tpu"],
        ["--schedule", "gpipe"],
        ["--population", "0"],
        ["--population", "8,-4"],
        ["--population", "8,x"],
        ["--population", ""],
        ["--repeats", "0"],
        ["--warmup", "-1"],
        ["--max-memory", "0"],
        ["example:tiny-2", "--max-memory", "1"],  # its tick tables alone exceed it
        ["missing.json"],
        ["bad.json"],
    ],
    ids=lambda args: " ".join(args) or "empty",
)
def test_bad_options_exit_2(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    result = run_cli("bench", *args)
    assert result.exit_code == 2, describe(result)
    assert result.stdout == ""
    assert result.stderr.startswith("tidgap: error: ") and result.stderr.count("\n") == 1


@pytest.mark.parametrize("option", ["--backend", "--schedule"])
def test_all_among_names_is_refused_as_such(option: str) -> None:
    """``all`` with names was refused as unknown while the message listed it as known."""
    result = run_cli("bench", option, "all,numba")
    assert result.exit_code == 2, describe(result)
    assert "'all' stands alone" in result.stderr and "unknown" not in result.stderr
