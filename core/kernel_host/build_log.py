"""What a kernel compiler said about a build that succeeded.

Compilers talk on successful builds: PoCL returns clang's warnings as the program's build
log *and* prints clang's "N warnings generated." straight to the process's stderr; pyopencl
turns any non-empty log into a ``CompilerWarning``, which a test suite running with
``filterwarnings = error`` (ours, and many users') turns into a failure. None of that is
the user's business on a build that worked, so each runtime captures its compiler's output
itself (the log, the Python warnings, and file descriptor 2 while the compiler runs),
keeps it on the compiled program (:class:`BuildLog`), and shows it where someone asks:
``riftco backends --verbose``, or inside the ``KernelCompileError`` of a failed build.

Some diagnostics are known to be harmless and are marked as such, with the reason, rather
than hidden: :data:`HARMLESS` is the list, and a kernel family whose build says anything
else fails ``tests/kernels/test_kernel_build_logs.py``.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field

#: Diagnostics that say nothing about the kernel's correctness: (pattern, why).
HARMLESS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"^\s*\d+ warnings? generated\.?\s*$"),
        "clang's count of the warnings above it",
    ),
    (
        re.compile(r"vector (argument|return) of type .* without '\w+' enabled changes the ABI"),
        "clang's -Wpsabi note on a wide vector builtin: PoCL links and inlines the builtin "
        "library into the kernel, so no call crosses an ABI boundary",
    ),
)

_DIAGNOSTIC = re.compile(r"\b(warning|error|note|remark)\b\s*:", re.IGNORECASE)


@dataclass(frozen=True)
class Diagnostic:
    """One line of compiler output: its text and, when known to be harmless, why."""

    text: str
    harmless: str = ""


@dataclass(frozen=True)
class BuildLog:
    """Everything a compiler said while building one program (empty when it said nothing)."""

    text: str = ""
    #: Human-readable origin: "flash_attention.cl [float32] on pthread-AMD EPYC".
    program: str = ""
    diagnostics: tuple[Diagnostic, ...] = field(default=(), compare=False)

    @classmethod
    def parse(cls, text: str, program: str = "") -> BuildLog:
        text = text.strip()
        out = []
        for line in text.splitlines():
            if not line.strip():
                continue
            why = next((reason for pattern, reason in HARMLESS if pattern.search(line)), "")
            if why or _DIAGNOSTIC.search(line):
                out.append(Diagnostic(line.strip(), why))
        return cls(text, program, tuple(out))

    @property
    def notable(self) -> list[str]:
        """Warning or error lines not known to be harmless (what a test should fail on)."""
        return [d.text for d in self.diagnostics if not d.harmless]

    def summary(self) -> str:
        """One line for listings: 'clean', or counts of notable and harmless diagnostics."""
        if not self.text:
            return "clean"
        harmless = sum(1 for d in self.diagnostics if d.harmless)
        parts = [f"{len(self.notable)} notable"] if self.notable else []
        parts += [f"{harmless} known harmless"] if harmless else []
        return ", ".join(parts) or "output without diagnostics"


#: One compiler at a time may own file descriptor 2 (see :func:`capture_compiler_output`);
#: reentrant, since captures nest (the Metal stand-in compiles through the OpenCL runtime).
_fd_lock = threading.RLock()


@contextlib.contextmanager
def capture_compiler_output(
    sink: list[str], duplicates: tuple[type[Warning], ...] = ()
) -> Iterator[None]:
    """Run a build with its stray output captured: Python warnings raised inside the block
    and whatever is written to file descriptor 2 (C libraries such as PoCL print there
    directly) are appended to ``sink`` instead of reaching the user. Warnings of the
    ``duplicates`` categories are dropped: they only announce a log the caller reads itself
    (pyopencl's ``CompilerWarning``).

    The descriptor is process-wide: another thread's stderr output during the build ends
    up in ``sink`` too, so builds are serialised and short compared to a program's life.
    Captured text is never lost: it becomes part of the program's :class:`BuildLog`.
    """
    with _fd_lock, tempfile.TemporaryFile(mode="w+b") as spool:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(spool.fileno(), 2)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                yield
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            spool.seek(0)
            printed = spool.read().decode("utf-8", errors="replace").strip()
            if printed:
                sink.append(printed)
            sink.extend(str(w.message) for w in caught if not issubclass(w.category, duplicates))
