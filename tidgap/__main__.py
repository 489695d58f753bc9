"""``python -m tidgap``: the same as the ``tidgap`` command."""

from tidgap.console import main

main()
