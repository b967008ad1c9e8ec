"""riftco.capture after the model changed under it: a parameter moved to another device, or
replaced by a new Variable bound to the same name. A replay runs none of the step's
Python, so it must notice, record again, and end as the eager step ends (its error, or
its result). Threads: each may capture and replay its own step, on one shared device.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import riftco
from helpers import backend_device, run_in_threads
from riftco import CaptureWarning, ops
from riftco.autograd import Variable
from riftco.errors import DeviceMismatchError
from riftco.nn import Module
from riftco.optim import SGD

BACKENDS = ["cpu", "native", "opencl", "metal"]


class Scale(Module):
    """loss = sum(x * w): dloss/dw = x, so every value below is known in closed form."""

    def __init__(self, n: int, dev: riftco.Device) -> None:
        self.w = Variable(riftco.tensor(np.ones(n, np.float32), device=dev), requires_grad=True)

    def forward(self, x: riftco.Tensor) -> Variable:
        return (Variable(x) * self.w).sum()


class Square(Scale):
    """loss = sum(w * w) + sum(x): dloss/dw = 2 w, so SGD at lr 0.25 halves w each step."""

    def forward(self, x: riftco.Tensor) -> Variable:
        return (self.w * self.w).sum() + Variable(x).sum()


def _stepper(model: Scale, lr: float = 0.5) -> object:
    opt = SGD(model.parameters(), lr=lr)

    def step(x: riftco.Tensor) -> Variable:
        opt.params = model.parameters()  # what a step that re-reads its model does
        for p in opt.params:
            p.grad = None
        loss = model(x)
        loss.backward()
        opt.step()
        return loss

    return riftco.capture(step)


def _replaying(model: Scale, dev: riftco.Device, n: int, lr: float = 0.5) -> object:
    step = _stepper(model, lr)
    for _ in range(4):
        step(riftco.tensor(np.zeros(n, np.float32), device=dev))  # w stays at ones
    assert step.stats.replayed >= 1
    return step


@pytest.mark.parametrize("target", ["native", "cpu"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_parameter_moved_to_another_device_raises_as_the_eager_step(
    backend, target, registry, monkeypatch
):
    """Before: the replay ran on the old device and put ``w.grad`` there (from opencl, a raw
    AttributeError); the eager step raises DeviceMismatchError."""
    dev = backend_device(backend, monkeypatch)
    other = backend_device(target, monkeypatch)
    if other == dev:
        pytest.skip("the move needs two different devices")
    model = Scale(3, dev)
    step = _replaying(model, dev, 3)
    model.to(other)
    x = riftco.tensor(np.full(3, 2.0, np.float32), device=dev)
    with pytest.raises(DeviceMismatchError), pytest.warns(CaptureWarning, match="moved"):
        step(x)
    assert model.w.device == other and model.w.grad is None
    # with the input moved too, it records again there and trains as the eager step would
    x = riftco.tensor(np.full(3, 2.0, np.float32), device=other)
    with pytest.warns(CaptureWarning, match=rf"arguments changed .* on {backend}:0 -> .* on"):
        losses = [float(step(x).item())]
    losses += [float(step(x).item()) for _ in range(3)]
    assert losses == pytest.approx([6.0, 0.0, -6.0, -12.0], rel=1e-6)  # w: 1, 0, -1, -2
    assert model.w.grad.device == other
    np.testing.assert_allclose(model.w.value.numpy(), np.full(3, -3.0), rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_parameter_replaced_by_another_shape_is_trained_not_the_old_one(
    backend, registry, monkeypatch
):
    """Before: the replay kept training the old (3,) parameter and returned its loss."""
    dev = backend_device(backend, monkeypatch)
    model = Square(3, dev)
    step = _replaying(model, dev, 3, lr=0.25)  # the old w: (3,), 1/16 after four steps
    new = np.full((2, 3), 2.0, np.float32)
    model.w = Variable(riftco.tensor(new, device=dev), requires_grad=True)
    x = riftco.tensor(np.ones(3, np.float32), device=dev)  # the same argument as recorded
    with pytest.warns(CaptureWarning, match="replaced"):
        losses = [float(step(x).item())]
    losses += [float(step(x).item()) for _ in range(4)]  # recorded twice, then replayed
    # six entries of w = 2, 1, 0.5, 0.25, 0.125 (halved per step), plus sum(x) = 3
    assert losses == pytest.approx([27.0, 9.0, 4.5, 3.375, 3.09375], rel=1e-6)
    np.testing.assert_allclose(model.w.value.numpy(), np.full((2, 3), 0.0625), rtol=1e-6)
    assert step.stats.replayed >= 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_threads_each_capture_their_own_step_on_one_device(backend, registry, monkeypatch):
    """Before: the second thread's recording raised 'called inside another recording'
    (the recorder was process-wide), and shadows one thread installed logged the other's
    calls."""
    dev = backend_device(backend, monkeypatch)
    together = threading.Barrier(4, timeout=10)  # every run of a step's Python overlaps

    def work(k: int) -> object:
        w = riftco.tensor(np.full(4, float(k), np.float32), device=dev)

        def add(x: riftco.Tensor) -> riftco.Tensor:
            together.wait()
            return ops.add(x, w)

        step = riftco.capture(add)
        for i in range(12):
            got = step(riftco.tensor(np.full(4, float(i), np.float32), device=dev)).numpy()
            assert np.array_equal(got, np.full(4, i + k, np.float32)), (i, got)
        return step.stats

    results = run_in_threads(work, 4)
    for k in range(4):
        stats = results[k]
        assert not isinstance(stats, BaseException), f"thread {k}: {stats!r}"
        assert stats.replayed >= 8, (k, stats)


@pytest.mark.parametrize("backend", BACKENDS)
def test_threads_training_captured_steps_match_lone_eager_runs(backend, registry, monkeypatch):
    """Threads x capture x one device: three threads each record and replay a tiny GPT's
    training step at once; every loss is bitwise the loss of the same run, eager and alone."""
    from test_capture import Run, _batches

    dev = backend_device(backend, monkeypatch)

    def losses(captured: bool, k: int) -> list[float]:
        run = Run(dev, captured)
        return [run(x, y, 1e-2) for x, y in _batches(6, seed=k)]

    alone = [losses(False, k) for k in range(3)]
    got = run_in_threads(lambda k: losses(True, k), 3, switch_interval=1e-5)
    assert [got[k] for k in range(3)] == alone
