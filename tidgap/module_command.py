"""The command line that runs one of tidgap's modules in a child Python process.

``python -m MODULE`` puts the current folder first on the child's path, so run from a
checkout of tidgap beside an installed tidgap, the child would import the checkout's
``tidgap`` (which lacks ``kernels`` and ``fallback_cpu``: they join the package only when
installed) instead of the parent's. The child here runs the module without that entry;
code that imports the user's modules (``module:attribute`` models) puts the current
folder on the path itself.
"""

from __future__ import annotations

import sys

#: ``python -c`` code: drop the current folder (``''``) from the path, then run the module
#: named by the first argument as ``__main__`` with the rest as its arguments.
BOOTSTRAP = (
    "import runpy, sys\n"
    "if sys.path[:1] == ['']:\n"
    "    del sys.path[0]\n"
    "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)\n"
)


def module_command(module: str, *args: str) -> list[str]:
    """``[python, -c, BOOTSTRAP, module, *args]``: :data:`BOOTSTRAP` running ``module``
    (dotted name) with ``args``, in this interpreter."""
    return [sys.executable, "-c", BOOTSTRAP, module, *args]
