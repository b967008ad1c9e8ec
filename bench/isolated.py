"""Run each benchmark contender in its own process, steps still interleaved.

Why: contenders sharing a process share its runtimes. PyTorch's CPU wheel and riftco's
native backend load the same ``libgomp.so.1``, which reads its wait policy once: after
riftco set ``OMP_WAIT_POLICY=passive`` for itself, PyTorch's threads slept between ops
too and its small step took 33.6 ms instead of 21.7 ms, a ratio flattering riftco by
1.5x. Numpy's OpenBLAS threads, allocator state and thread pools interfere the same way.
Here every contender owns a process with its own runtimes; the parent tells one worker
at a time to run one step (round-robin, rotating who goes first), so all contenders still
see the same moments of a noisy machine.

Protocol: the worker prints ``@@ready <first loss>`` (or ``@@error <text>``) once built,
then answers each ``step`` line on stdin with ``@@t <seconds>``; anything else it prints
is ignored.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parent / "train_step.py"


class Worker:
    """Parent side: one contender in a child process (``train_step.py --worker SPEC``)."""

    def __init__(self, spec: dict[str, Any], threads: int) -> None:
        self.spec = spec
        cmd = [sys.executable, str(SCRIPT), "--threads", str(threads), "--worker", json.dumps(spec)]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def _reply(self) -> tuple[str, str]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("@@"):
                tag, _, rest = line[2:].strip().partition(" ")
                return tag, rest
        err = self.proc.stderr.read() if self.proc.stderr else ""
        return "error", f"worker exited ({self.proc.wait()}): {err.strip()[-300:]}"

    def ready(self) -> float:
        """The first step's loss, once the contender is built (raises with the reason)."""
        tag, rest = self._reply()
        if tag != "ready":
            self.close()
            raise RuntimeError(rest)
        return float(rest)

    def step(self) -> float:
        """Run one step in the worker; its own wall time for that step, in seconds."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("step\n")
        self.proc.stdin.flush()
        tag, rest = self._reply()
        if tag != "t":
            raise RuntimeError(f"{self.spec}: {rest}")
        return float(rest)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=30)
            except Exception:  # a stuck worker must not hang the benchmark
                self.proc.kill()


def serve(build: Callable[[], Callable[[], float]]) -> None:
    """Child side: build the step (``build`` runs the first step and returns the step
    function plus the first loss through :func:`ready`), then time steps on request."""
    try:
        step = build()
        first = step()
    except Exception as exc:  # reported to the parent as a skip reason
        print(f"@@error {type(exc).__name__}: {str(exc)[:300]}".replace("\n", " "), flush=True)
        return
    print(f"@@ready {first!r}", flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "quit":
            break
        if cmd == "step":
            t0 = time.perf_counter()
            step()
            print(f"@@t {time.perf_counter() - t0!r}", flush=True)
