"""What the ``riftco`` command does before its own code can run.

Ctrl-C while the command is still importing (numpy, pluggy, riftco: about a second) would
end in a raw ``KeyboardInterrupt`` traceback through numpy's internals (issue 31). Nothing
of riftco's can catch it there, so the package's first statement installs an excepthook
that prints one line for an uncaught KeyboardInterrupt instead, and only in the ``riftco``
command's process (a program importing riftco keeps its own hook and tracebacks). Python
still exits as killed by SIGINT (status 130 in a shell).
"""

from __future__ import annotations

import os
import sys
from types import TracebackType

#: What the console script is called (``[project.scripts]`` in pyproject.toml).
COMMAND = "riftco"


def in_command() -> bool:
    """True in the ``riftco`` command's own process (not a program or test importing it)."""
    return bool(sys.argv) and os.path.basename(sys.argv[0]) == COMMAND


def quiet_interrupt_in_command() -> None:
    if not in_command():
        return
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        if issubclass(kind, KeyboardInterrupt):
            print(f"{COMMAND}: interrupted while starting; nothing was run", file=sys.stderr)
            return
        previous(kind, value, tb)

    sys.excepthook = hook
