"""A bad embedding id changes no parameter and no moment, on every backend (issue 31;
docs/DECISIONS.md, "A bad id on a device"). Before: on opencl and the Metal stand-in the
ids were flagged by the kernel and reported at the next download, after AdamW had already
updated the other rows. Now the adam kernels read the device status and write nothing;
SGD checks on the host first; the host backends refuse before any kernel."""

from __future__ import annotations

import numpy as np
import pytest
import riftco
from helpers import backend_device
from riftco import DomainError
from riftco.autograd import Variable, cross_entropy, embedding
from riftco.optim import SGD, AdamW


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
@pytest.mark.parametrize("backend", ["cpu", "native", "opencl", "metal", "cffi_example"])
def test_a_bad_id_changes_no_parameter(backend, optimizer, registry, monkeypatch):
    dev = backend_device(backend, monkeypatch)
    w0 = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    w = Variable(riftco.tensor(w0, device=dev), requires_grad=True)
    opt = AdamW([w], lr=0.1) if optimizer == "adamw" else SGD([w], lr=0.1)
    ids = riftco.tensor(np.array([0, 1, 7], np.int32), device=dev)  # 7 is not below 5
    targets = riftco.tensor(np.array([0, 1, 2], np.int32), device=dev)
    with pytest.raises(DomainError, match=r"\[embedding\] ids must lie in \[0, 5\)"):
        loss = cross_entropy(embedding(w, ids), targets)
        loss.backward()
        opt.step()
        loss.item()  # where a device reported it before
    assert np.array_equal(w.value.numpy(), w0)
    state = opt.state[0] if optimizer == "adamw" else None
    if state is not None:  # a device: the kernel wrote nothing (the host counted the step)
        assert not state["m"].numpy().any() and not state["v"].numpy().any()
    # the device is usable afterwards, and a good step trains
    w.grad = None
    good = riftco.tensor(np.array([0, 1, 4], np.int32), device=dev)
    cross_entropy(embedding(w, good), targets).backward()
    opt.step()
    assert not np.array_equal(w.value.numpy(), w0)
