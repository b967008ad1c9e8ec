"""Training progress: a live bar on a terminal, plain lines everywhere else.

A tqdm bar redraws itself with carriage returns; in a CI log, a file (``make train > log
2>&1``) or a notebook that becomes one endless line. So ``auto`` draws the bar only when
its stream (stderr, as tqdm does) is a terminal, and otherwise prints a complete line to
stdout every few seconds, interleaved in order with the run's other output.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, Protocol, TextIO

MODES = ("auto", "bar", "lines", "none")
LINE_EVERY_S = 10.0


class Progress(Protocol):
    def update(self, step: int, stats: str) -> None: ...
    def close(self) -> None: ...


class NoProgress:
    def update(self, step: int, stats: str) -> None:
        pass

    def close(self) -> None:
        pass


class BarProgress:
    """tqdm's bar; ``stats`` goes in its postfix."""

    def __init__(self, total: int, initial: int, stream: TextIO | None = None) -> None:
        from tqdm import tqdm

        self.bar = tqdm(
            total=total,
            initial=initial,
            file=stream,
            unit="step",
            dynamic_ncols=True,
            leave=True,
        )
        self.step = initial

    def update(self, step: int, stats: str) -> None:
        self.bar.set_postfix_str(stats, refresh=False)
        self.bar.update(step - self.step)
        self.step = step

    def close(self) -> None:
        self.bar.close()


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return (
        f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


class LineProgress:
    """One self-contained line per ``every_s`` seconds (and for the first and last step)."""

    def __init__(
        self,
        total: int,
        initial: int,
        stream: TextIO | None = None,
        every_s: float = LINE_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total, self.initial = total, initial
        self.stream = stream
        self.every_s = every_s
        self.clock = clock
        self.start = clock()
        self.last: float | None = None
        self.pending: tuple[int, str] | None = None

    def _emit(self, step: int, stats: str) -> None:
        now = self.clock()
        elapsed = now - self.start
        done = step - self.initial
        eta = elapsed / done * (self.total - step) if done > 0 else 0.0
        pct = 100.0 * step / self.total if self.total else 100.0
        stream = self.stream if self.stream is not None else sys.stdout
        stream.write(
            f"step {step}/{self.total} ({pct:.0f}%): {stats}; elapsed {_clock(elapsed)}, "
            f"left ~{_clock(eta)}\n"
        )
        stream.flush()
        self.last, self.pending = now, None

    def update(self, step: int, stats: str) -> None:
        if self.last is None or step >= self.total or self.clock() - self.last >= self.every_s:
            self._emit(step, stats)
        else:
            self.pending = (step, stats)

    def close(self) -> None:
        if self.pending is not None:  # a run that stops early still reports where it stopped
            self._emit(*self.pending)


def make_progress(
    mode: bool | str | Any, total: int, initial: int, every_s: float = LINE_EVERY_S
) -> Progress:
    """``mode``: a :data:`MODES` name, True (``auto``), False (``none``) or a Progress."""
    if hasattr(mode, "update") and hasattr(mode, "close"):
        return mode
    name = ("auto" if mode else "none") if isinstance(mode, bool) else mode
    if name not in MODES:
        raise ValueError(f"[train] progress must be one of {MODES} or a bool; got {mode!r}")
    if name == "auto":
        name = "bar" if is_terminal(sys.stderr) else "lines"
    if name == "bar":
        return BarProgress(total, initial)
    if name == "lines":
        return LineProgress(total, initial, every_s=every_s)
    return NoProgress()


def is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or replaced streams
        return False


def describe(mode: bool | str, every_s: float = LINE_EVERY_S) -> str:
    """What ``make_progress(mode)`` will do, for the run's opening lines."""
    name = ("auto" if mode else "none") if isinstance(mode, bool) else mode
    if name == "auto":
        if is_terminal(sys.stderr):
            return "a bar on stderr"
        return f"a line every {every_s:g} s (stderr is not a terminal)"
    return {
        "bar": "a bar on stderr",
        "lines": f"a line every {every_s:g} s",
        "none": "off",
    }.get(str(name), str(name))
