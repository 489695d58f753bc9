"""``python -m tidgap``: the same as the ``tidgap`` command."""

from tidgap.cli import main

main()
