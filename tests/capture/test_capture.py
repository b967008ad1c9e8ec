"""riftco.capture: a replayed training step gives the eager step's bits, and every error
the eager step raises still surfaces.

Each test runs two identical models side by side, one as written and one captured, and
compares losses, parameters, gradients and optimizer state bit for bit (the eager run is
the independent reference: the same math through the checked, graph-building path).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import riftco
from helpers import backend_device
from riftco import CaptureError, CaptureWarning, ops
from riftco.autograd import Variable, cross_entropy
from riftco.errors import DomainError, StaleGraphError
from riftco.nn import GPT, GPTConfig
from riftco.optim import AdamW, grad_norm

VOCAB, CTX, BATCH = 11, 8, 3


def _device(name: str, monkeypatch: pytest.MonkeyPatch) -> riftco.Device:
    return backend_device(name, monkeypatch)


class Run:
    """A tiny GPT with AdamW (clipped inside), stepping as the trainer does."""

    def __init__(self, dev: riftco.Device, captured: bool, **kw: object) -> None:
        cfg = GPTConfig(vocab=VOCAB, context=CTX, layers=2, heads=2, width=16, **kw)
        self.dev = dev
        self.model = GPT(cfg, device=dev, seed=0)
        self.params = self.model.parameters()
        self.opt = AdamW(self.params, lr=1e-2, weight_decay=0.1)
        self.step = riftco.capture(self._step) if captured else self._step

    def _step(self, x: riftco.Tensor, y: riftco.Tensor, lr: float) -> Variable:
        loss = cross_entropy(self.model(x), y)
        loss.backward()
        self.opt.lr = lr
        self.opt.step(grad_norm=grad_norm(self.params), max_norm=1.0)
        return loss

    def __call__(self, x: np.ndarray, y: np.ndarray, lr: float) -> float:
        t = riftco.tensor(x, device=self.dev)
        loss = self.step(t, riftco.tensor(y, device=self.dev), lr)
        return float(loss.item())


def _batches(n: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    ids = [rng.integers(0, VOCAB, (BATCH, CTX + 1)).astype(np.int32) for _ in range(n)]
    return [(i[:, :-1].copy(), i[:, 1:].reshape(-1).copy()) for i in ids]


def _assert_same(a: Run, b: Run) -> None:
    for (name, p), (_, q) in zip(a.model.named_parameters(), b.model.named_parameters()):
        assert np.array_equal(p.value.numpy(), q.value.numpy()), f"{name} value"
        assert np.array_equal(p.grad.numpy(), q.grad.numpy()), f"{name} grad"
        assert p.version == q.version, f"{name} version"
    for s, t in zip(a.opt.state, b.opt.state):
        assert s["step"] == t["step"]
        assert np.array_equal(s["m"].numpy(), t["m"].numpy())
        assert np.array_equal(s["v"].numpy(), t["v"].numpy())


#: cffi_example has no fused ops of its own: its AdamW is core's composite, whose per-step
#: numbers (bias corrections, a scheduled lr) must reach the replay as refilled numbers.
@pytest.mark.parametrize("backend", ["cpu", "native", "opencl", "metal", "cffi_example"])
@pytest.mark.parametrize("attention", ["materialized", "flash"])
def test_replayed_steps_are_bitwise_the_eager_steps(backend, attention, registry, monkeypatch):
    dev = _device(backend, monkeypatch)
    eager, cap = Run(dev, False, attention=attention), Run(dev, True, attention=attention)
    for i, (x, y) in enumerate(_batches(7)):
        lr = 1e-2 * (i + 1) / 7  # a schedule: refilled on every replay
        assert eager(x, y, lr) == cap(x, y, lr), f"loss of step {i}"
    _assert_same(eager, cap)
    stats = cap.step.stats
    assert (stats.eager, stats.recorded, stats.replayed) == (1, 2, 4)
    assert stats.backend_calls > 40  # the whole step is in the plan
    names = cap.step.plans[0].call_names  # what bench/step_profile.py lines up with timing
    assert len(names) == stats.backend_calls
    assert ("adam_update_multi" in names) == (backend != "cffi_example")  # else composite
    cap.step.timing = []
    cap(*_batches(1, seed=1)[0], 1e-3)
    assert len(cap.step.timing) == len(names) and all(t >= 0 for t in cap.step.timing)


def test_new_shapes_record_again_with_a_warning(registry, monkeypatch):
    dev = _device("cpu", monkeypatch)
    eager, cap = Run(dev, False), Run(dev, True)
    for x, y in _batches(4):
        assert eager(x, y, 1e-2) == cap(x, y, 1e-2)
    x, y = _batches(1, seed=1)[0]
    short = (x[:, : CTX // 2].copy(), y[: BATCH * CTX // 2].copy())
    with pytest.warns(CaptureWarning, match=r"arguments changed \(argument 0: Tensor \(3, 8\)"):
        assert eager(*short, 1e-2) == cap(*short, 1e-2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # going back to a shape already planned: silent
        for x, y in _batches(3, seed=2):
            assert eager(x, y, 1e-2) == cap(x, y, 1e-2)
    _assert_same(eager, cap)
    assert cap.step.stats.replayed >= 3


def test_out_of_range_targets_raise_on_replay_where_the_eager_step_raises(registry, monkeypatch):
    """On host buffers the ids are checked before any gradient or update (the eager step's
    order); on a device the kernels flag them and the loss read raises (the eager step's
    order there too): either way the replay ends exactly as the eager step does."""
    for backend in ("cpu", "opencl"):
        entry = riftco.get_registry().entries.get(backend)
        if entry is None or not entry.available or not entry.devices():
            continue
        dev = riftco.device(backend)
        eager, cap = Run(dev, False), Run(dev, True)
        for x, y in _batches(5):
            assert eager(x, y, 1e-2) == cap(x, y, 1e-2)
        assert cap.step.stats.replayed == 2
        before = {n: p.value.numpy() for n, p in cap.model.named_parameters()}
        x, y = _batches(1, seed=3)[0]
        y[4] = VOCAB + 2
        for run in (eager, cap):
            with pytest.raises(DomainError, match=rf"\[cross_entropy\] .*{VOCAB + 2}"):
                run(x, y, 1e-2)
        _assert_same(eager, cap)
        if backend == "cpu":
            for n, p in cap.model.named_parameters():
                assert np.array_equal(before[n], p.value.numpy()), n
            assert cap.opt.state[0]["step"] == 5  # the optimizer's bookkeeping did not run


def test_a_nan_learning_rate_reaches_the_ops_own_check(registry, monkeypatch):
    dev = _device("cpu", monkeypatch)
    cap = Run(dev, True)
    for x, y in _batches(4):
        cap(x, y, 1e-2)
    with pytest.raises(DomainError, match=r"\[adam_update_multi\] needs finite lr.*got lr=nan"):
        cap(*_batches(1)[0], float("nan"))


def test_optimizer_and_model_state_loaded_between_replays_are_used(registry, monkeypatch):
    dev = _device("native", monkeypatch)
    eager, cap = Run(dev, False), Run(dev, True)
    for x, y in _batches(5):
        eager(x, y, 1e-2)
        cap(x, y, 1e-2)
    donor = Run(dev, False)
    for x, y in _batches(2, seed=4):
        donor(x, y, 3e-2)
    for run in (eager, cap):  # new tensors everywhere: parameters and moments
        run.model.load_state_dict(donor.model.state_dict())
        run.opt.load_state_dict(donor.opt.state_dict())
    for x, y in _batches(3, seed=5):
        assert eager(x, y, 1e-2) == cap(x, y, 1e-2)
    _assert_same(eager, cap)
    assert cap.step.stats.replayed == 5


def test_replay_bumps_versions_so_older_graphs_go_stale(registry, monkeypatch):
    dev = _device("cpu", monkeypatch)
    cap = Run(dev, True)
    for x, y in _batches(4):
        cap(x, y, 1e-2)
    w = cap.params[0]
    old = (w * w).sum()  # a graph that read the parameter before the next update
    cap(*_batches(1)[0], 1e-2)
    assert cap.step.stats.replayed == 2  # the fourth call and this one
    with pytest.raises(StaleGraphError):
        old.backward()


def test_a_written_pinned_tensor_records_again(registry, monkeypatch):
    dev = _device("cpu", monkeypatch)
    mask = riftco.tensor(np.ones((4,), np.float32), device=dev)

    def step(x):
        return ops.mul(x, mask)

    cap = riftco.capture(step)
    x = riftco.tensor(np.arange(4, dtype=np.float32), device=dev)
    for _ in range(4):
        assert np.array_equal(cap(x).numpy(), np.arange(4))
    ops.fill_(mask, 2.0)  # an in-place write the plan did not make
    with pytest.warns(CaptureWarning, match="written since recording"):
        got = cap(x).numpy()
    assert np.array_equal(got, 2 * np.arange(4))


def test_steps_that_cannot_be_replayed_run_as_written(registry, monkeypatch):
    dev = _device("cpu", monkeypatch)
    x = riftco.tensor(np.arange(3, dtype=np.float32), device=dev)
    calls = {"n": 0}

    def reads(t):  # acts on a device value
        return ops.mul_scalar(t, 2.0) if ops.sum(t).item() > 0 else t

    def frozen(t):  # a number that changes per call but is not an argument
        calls["n"] += 1
        return ops.mul_scalar(t, float(calls["n"]))

    def number(t):
        return float(ops.sum(t).item())

    frozen_why = r"mul_scalar \(call 0\) argument 1: 2.0 then 3.0"
    cases = [(reads, "downloads a tensor"), (frozen, frozen_why), (number, "downloads")]
    for fn, why in cases:
        cap = riftco.capture(fn)
        with pytest.warns(CaptureWarning, match=why):
            outs = [cap(x) for _ in range(5)]
        assert cap.stats.replayed == 0 and why.split()[0] in cap.refused
        if fn is frozen:  # each call multiplied by its own count, as written
            assert [float(o.numpy()[1]) for o in outs] == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_errors_of_the_eager_step_still_raise(registry, monkeypatch):
    dev = _device("cpu", monkeypatch)
    w = Variable(riftco.tensor(np.ones(3, np.float32), device=dev), requires_grad=True)

    def stale(x):
        y = (w * x).sum()
        ops.fill_(x, 0.0)  # x is read by the graph: backward must refuse
        y.backward()
        return w.grad

    cap = riftco.capture(stale)
    for _ in range(4):
        with pytest.raises(StaleGraphError):
            cap(riftco.tensor(np.ones(3, np.float32), device=dev))
    inner = riftco.capture(lambda t: t)
    outer = riftco.capture(lambda t: inner(t))
    t = riftco.tensor(np.ones(2, np.float32), device=dev)
    outer(t)  # warm-up runs as written
    with pytest.raises(CaptureError, match="inside another recording"):
        outer(t)


def test_replay_holds_no_more_memory_than_the_eager_step(registry, monkeypatch):
    """Intermediates are let go at their last use, as the eager step's die with its graph."""
    import gc

    dev = _device("cpu", monkeypatch)
    backend = dev.backend
    extra = {}
    for captured in (False, True):
        run = Run(dev, captured)
        for x, y in _batches(4):
            run(x, y, 1e-2)
        gc.collect()
        base = backend.memory_stats()["allocated_bytes"]
        backend.reset_peak()
        run(*_batches(1)[0], 1e-2)
        extra[captured] = backend.memory_stats()["peak_bytes"] - base
        assert not captured or run.step.stats.replayed == 2
        del run
    assert 0 < extra[True] <= extra[False], extra


def test_arguments_first_seen_through_a_view_replay_through_their_own_layout(registry, monkeypatch):
    """The recording keys a storage by its first-seen view; a later use of the argument
    itself must still get the argument's layout (found by the conformance capture section:
    composites reshaped an argument before using it whole)."""
    dev = _device("cpu", monkeypatch)

    def step(x):
        row = ops.sum(x.reshape((2, 6)), 1)  # a view first
        return ops.add(ops.mul(x, x), x), row  # then the argument as given

    cap = riftco.capture(step)
    for i in range(5):
        host = np.arange(12, dtype=np.float32).reshape(3, 4) + i
        sq, row = cap(riftco.tensor(host, device=dev))
        assert np.array_equal(sq.numpy(), host * host + host)
        assert np.array_equal(row.numpy(), host.reshape(2, 6).sum(1))
    assert cap.stats.replayed == 2


@pytest.mark.parametrize("backend", ["cpu", "opencl"])
def test_the_trainer_replays_with_the_label_smoothing_head(backend, registry, monkeypatch):
    """The compiled smoothing objective views a cached arange afresh on every call (a new
    view object over the same memory): recordings must still agree, and replay bitwise."""
    from riftco.train.data import CharDataset, load_text
    from riftco.train.loop import TrainConfig, Trainer

    dev = _device(backend, monkeypatch)
    text, source = load_text(None)
    data = CharDataset.from_text(text[:20_000], 8, source)
    cfg = GPTConfig(vocab=data.tokenizer.vocab_size, context=8, layers=1, heads=2, width=16)
    tcfg = TrainConfig(steps=6, batch_size=2, grad_clip=1.0, label_smoothing=0.1)
    runs = [Trainer(GPT(cfg, device=dev, seed=0), data, tcfg, capture=c) for c in (False, True)]
    for _ in range(6):
        assert runs[0].train_step() == runs[1].train_step()
    for (name, p), (_, q) in zip(
        runs[0].model.named_parameters(), runs[1].model.named_parameters()
    ):
        assert np.array_equal(p.value.numpy(), q.value.numpy()), name
    stats = runs[1]._captured.stats
    assert stats.replayed == 3, (stats, runs[1]._captured.refused)


@pytest.mark.parametrize("backend", ["opencl", "metal"])
def test_a_replay_asks_the_device_for_no_memory(backend, registry, monkeypatch):
    """Outputs come from the caching allocator's pool on replay: no device allocation."""
    dev = _device(backend, monkeypatch)
    run = Run(dev, True)
    for x, y in _batches(4):
        run(x, y, 1e-2)
    before = dev.backend.memory_stats()
    run(*_batches(1)[0], 1e-2)
    after = dev.backend.memory_stats()
    assert run.step.stats.replayed == 2
    assert after["device_allocations"] == before["device_allocations"], (before, after)
    assert after["reuses"] - before["reuses"] > 40  # the step's outputs did come from the pool
