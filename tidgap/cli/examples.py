"""``tidgap examples``: the built-in problems."""

from __future__ import annotations

import click

from tidgap.cli.options import (
    echo_json,
    json_option,
)
from tidgap.model.examples import example_names, example_summary


@click.command(name="examples")
@json_option
def examples_command(as_json: bool) -> None:
    """List the built-in problems (use them as example:NAME)."""
    summaries = [example_summary(name) for name in example_names()]
    if as_json:
        echo_json(summaries)
        return
    for item in summaries:
        click.echo(
            f"example:{item['name']:<12} {item['stages']} stages, batch {item['batch_size']}, "
            f"unit {item['unit']}  {item['description']}"
        )
