"""The process that first imported tidgap, and its parent then: standard library only,
imported first by ``tidgap/__init__.py`` so that it is read as the process starts."""

from __future__ import annotations

import os

#: This process's id and its parent's when tidgap was first imported.
PROCESS, PARENT = os.getpid(), os.getppid()


def parent_at_start() -> int:
    """The parent this process had when it imported tidgap (a stage under torchrun whose
    agent dies while it builds its model has another by the time it watches for it), or,
    in a child forked since (which inherits these figures), its parent now."""
    return PARENT if os.getpid() == PROCESS else os.getppid()
