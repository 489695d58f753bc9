"""The ``tidgap`` command line: thin click commands over the Python API, one module per
command (:mod:`tidgap.cli.options` holds the shared options).

Bad input or usage prints one line, ``tidgap: error: FILE: FIELD: reason``, and exits 2.
"""

from __future__ import annotations

from tidgap.cli.bench import bench_command
from tidgap.cli.calibrate import calibrate_command
from tidgap.cli.compare import compare_command
from tidgap.cli.evaluate import evaluate_command
from tidgap.cli.examples import examples_command
from tidgap.cli.export import export_command
from tidgap.cli.main import cli
from tidgap.cli.profile import profile_command, synth_command
from tidgap.cli.run import run_command
from tidgap.cli.search import search_command
from tidgap.cli.sweep import sweep_command

for command in (
    evaluate_command,
    compare_command,
    examples_command,
    search_command,
    sweep_command,
    export_command,
    profile_command,
    synth_command,
    run_command,
    calibrate_command,
    bench_command,
):
    cli.add_command(command)


def main() -> None:
    """Console-script entry point."""
    cli()


__all__ = ["cli", "main"]
