"""Threads sharing one device get their own values (docs/DECISIONS.md, "Threads sharing a
device"): a device is shared as PyTorch's and CuPy's are, every call into its runtime
serialised by the backend's lock.

Before that lock, 8 threads each uploading, adding a scalar and downloading got other
threads' values on opencl (2 to 10 wrong of 3,200 per run) and on the Metal stand-in (23
to 30 wrong, and ``IndexError: pop from an empty deque`` from the runtime's pending list).
The switch interval is cut to a microsecond so the threads interleave inside each call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest
import riftco
from helpers import backend_device, run_in_threads
from riftco import ops

BACKENDS = ["cpu", "native", "opencl", "metal"]


def _in_threads(work: Callable[[int], None], n: int = 8) -> list[str]:
    """Run ``work(k)`` in ``n`` threads at once; what went wrong in each, if anything."""
    results = run_in_threads(work, n)
    return [
        f"thread {k}: {type(r).__name__}: {r}"
        for k, r in sorted(results.items())
        if isinstance(r, BaseException)
    ]


@pytest.mark.parametrize("backend", BACKENDS)
def test_threads_sharing_a_device_get_their_own_values(backend, registry, monkeypatch):
    dev = backend_device(backend, monkeypatch)
    wrong: list[tuple[int, int, float]] = []

    def work(k: int) -> None:
        for i in range(400):
            value = float(k * 1000 + i)
            x = riftco.tensor(np.full(7, value, np.float32), device=dev)
            got = ops.add_scalar(x, 0.5).numpy()
            if not np.all(got == value + 0.5):
                wrong.append((k, i, float(got[0])))

    assert _in_threads(work) == []
    assert wrong == [], f"{len(wrong)} of 3200 wrong, e.g. {wrong[:3]}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_threads_training_on_one_device_match_a_lone_thread(backend, registry, monkeypatch):
    """Forward, backward and an optimizer step in each thread (many launches per step, the
    status buffer of the embedding kernels, the allocator recycling buffers across threads),
    checked against the same steps run alone."""
    from riftco.autograd import Variable, cross_entropy, embedding
    from riftco.optim import AdamW

    dev = backend_device(backend, monkeypatch)
    rng = np.random.default_rng(0)
    tables = [rng.standard_normal((9, 6)).astype(np.float32) for _ in range(4)]
    ids = [rng.integers(0, 9, 5).astype(np.int32) for _ in range(4)]
    targets = [rng.integers(0, 6, 5).astype(np.int32) for _ in range(4)]

    def train(k: int) -> list[float]:
        w = Variable(riftco.tensor(tables[k], device=dev), requires_grad=True)
        opt = AdamW([w], lr=0.1)
        losses = []
        for _ in range(6):
            w.grad = None
            x = riftco.tensor(ids[k], device=dev)
            loss = cross_entropy(embedding(w, x), riftco.tensor(targets[k], device=dev))
            loss.backward()
            opt.step()
            losses.append(float(loss.item()))
        return losses

    alone = [train(k) for k in range(4)]
    together = run_in_threads(train, 4)
    for k in range(4):  # the same kernels on the same data: the same bits
        assert together[k] == alone[k], (k, together[k])


def test_no_grad_in_one_thread_leaves_another_threads_graph_alone():
    """Grad mode is per thread, as PyTorch's: before, one thread inside ``no_grad`` (an
    evaluation) made another's forward build no graph, and its backward failed."""
    from riftco.autograd import Variable, no_grad

    inside, release = threading.Event(), threading.Event()

    def evaluate() -> None:
        with no_grad():
            inside.set()
            release.wait(10)

    t = threading.Thread(target=evaluate)
    t.start()
    try:
        assert inside.wait(10)
        w = Variable(riftco.tensor(np.array([3.0], np.float32)), requires_grad=True)
        (w * w).sum().backward()  # d(w^2)/dw = 2 w
        assert w.grad is not None and w.grad.numpy().tolist() == [6.0]
    finally:
        release.set()
        t.join()
