"""Optimizers over autograd Variables: SGD, AdamW and global-norm gradient clipping.

``backward()`` replaces gradients, so a step reads exactly the last pass's gradients and
no ``zero_grad`` is needed. Steps write parameters in place (``ops.assign_`` /
``ops.adam_update``), which bumps their versions: graphs built before the step become
stale. Optimizer state lives on each parameter's backend; ``state_dict`` holds host numpy
copies plus step counts, for checkpoints.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from . import ops
from .autograd import Variable
from .errors import DTypeError, ShapeError
from .ops.capture_hooks import host
from .ops.deferred import check_before_update
from .ops.fused.adam_multi import CLIP_EPS
from .tensor import Tensor


def _params(params: Iterable[Variable], op: str) -> list[Variable]:
    out = list(params)
    for i, p in enumerate(out):
        if not isinstance(p, Variable) or not p.requires_grad:
            raise DTypeError(f"[{op}] params[{i}] must be a Variable with requires_grad=True")
    if len({id(p) for p in out}) != len(out):
        raise ShapeError(f"[{op}] a parameter is listed twice")
    return out


def _values_checked(params: list[Variable], device_status: bool = True) -> None:
    """Raise a value error a device deferred (an embedding id out of range, found by a
    kernel or a composite's flag) before an update writes any parameter, as the host
    backends refuse before the kernel runs. One small read, which waits for the queue,
    when such a kernel ran; AdamW skips the status word (``device_status=False``): its
    kernels read it themselves and write nothing."""
    values = [p.value for p in params if p.grad is not None]
    if values:  # through host: a captured step checks again on every replay
        host(_check_backends if device_status else _check_flags, *values)


def _check_backends(*values: Tensor) -> None:
    for backend in {id(v.backend): v.backend for v in values}.values():
        check_before_update(backend)


def _check_flags(*values: Tensor) -> None:
    for backend in {id(v.backend): v.backend for v in values}.values():
        check_before_update(backend, device_status=False)


def _owned(p: Variable) -> Tensor:
    """The parameter's value as a dense tensor owning its storage (in-place updates need it)."""
    v = p.value
    if not v.is_dense or v.storage.size != v.size:
        p.assign(v.backend.copy_strided(v))
    return p.value


def _zeros(like: Tensor) -> Tensor:
    out = like.backend.allocate(like.shape, like.dtype)
    like.backend.fill(out, 0.0)
    return out


class SGD:
    """``p -= lr * (grad + weight_decay * p)``."""

    def __init__(self, params: Iterable[Variable], lr: float, weight_decay: float = 0.0) -> None:
        self.params = _params(params, "SGD")
        self.lr = float(lr)
        self.weight_decay = float(weight_decay)

    def step(self) -> None:
        _values_checked(self.params)
        for p in self.params:
            if p.grad is None:
                continue
            v = _owned(p)
            g = p.grad
            if self.weight_decay:
                g = ops.add(g, ops.mul_scalar(v, self.weight_decay))
            ops.assign_(v, ops.sub(v, ops.mul_scalar(g, self.lr)))

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def state_dict(self) -> dict[str, Any]:
        return {"lr": self.lr, "weight_decay": self.weight_decay}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.lr = float(state["lr"])
        self.weight_decay = float(state.get("weight_decay", 0.0))


class AdamW:
    """Adam with decoupled weight decay, through ``ops.adam_update_multi`` (native or
    composite): one call per step for all parameters, gradient clipping optional inside."""

    def __init__(
        self,
        params: Iterable[Variable],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        self.params = _params(params, "AdamW")
        self.lr = float(lr)
        self.betas = (float(betas[0]), float(betas[1]))
        self.eps = float(eps)
        self.weight_decay = float(weight_decay)
        self.state: list[dict[str, Any] | None] = [None] * len(self.params)

    def step(self, *, grad_norm: Tensor | None = None, max_norm: float = 1.0) -> None:
        """One AdamW step on every parameter that has a gradient.

        ``grad_norm`` (what :func:`grad_norm` returns) clips inside the update: each
        gradient is scaled by ``max_norm / max(grad_norm + 1e-6, max_norm)``, the scale
        ``clip_grad_norm`` would apply, without a scaling pass and without rewriting
        ``p.grad``. Parameters on one backend, in one dtype and at one step count (all of
        them in a training run) take one ``adam_update_multi`` call; a backend without
        the native op runs its composite (the scale from primitives, then ``adam_update``
        per parameter)."""
        b1, b2 = self.betas
        # A bad id a kernel flagged stops the update on the device (the adam kernels read
        # the status word and write nothing): no host wait for it (docs/DECISIONS.md).
        _values_checked(self.params, device_status=False)
        # The bookkeeping (state made on first use, step counts) is host work a captured
        # step must redo on every replay, and what it hands over (the parameters' current
        # tensors, their moments, the step count) is what the replay must use.
        for step, values, grads, ms, vs in host(self._advance):
            norm = None if grad_norm is None else _norm_on(grad_norm, values[0])
            ops.adam_update_multi(
                values, grads, ms, vs, self.lr, b1, b2, self.eps, self.weight_decay, step,
                norm, max_norm,
            )  # fmt: skip

    def _advance(self) -> list[tuple[int, list[Tensor], list[Tensor], list[Tensor], list[Tensor]]]:
        """Count one step for every parameter with a gradient; group them per backend,
        dtype and step count: ``[(step, values, grads, ms, vs)]``."""
        groups: dict[tuple[int, Any, int], list[int]] = {}
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            v = _owned(p)
            st = self.state[i]
            if st is None or st["m"].backend is not v.backend:
                st = self.state[i] = {"m": _zeros(v), "v": _zeros(v), "step": 0}
            st["step"] += 1
            groups.setdefault((id(v.backend), v.dtype, st["step"]), []).append(i)
        out = []
        for (_, _, step), idx in groups.items():
            states = [st for st in (self.state[i] for i in idx) if st is not None]
            out.append((
                step,
                [self.params[i].value for i in idx],
                [_grad(self.params[i]) for i in idx],
                [st["m"] for st in states],
                [st["v"] for st in states],
            ))  # fmt: skip
        return out

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def state_dict(self) -> dict[str, Any]:
        """Host copies: ``{"lr", "betas", "eps", "weight_decay", "state": [{m, v, step}|None]}``."""
        return {
            "lr": self.lr,
            "betas": self.betas,
            "eps": self.eps,
            "weight_decay": self.weight_decay,
            "state": [
                None
                if st is None
                else {"m": st["m"].numpy(), "v": st["v"].numpy(), "step": st["step"]}
                for st in self.state
            ],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        entries = state["state"]
        if len(entries) != len(self.params):
            raise ShapeError(
                f"[AdamW.load_state_dict] state has {len(entries)} entries for "
                f"{len(self.params)} parameters"
            )
        new: list[dict[str, Any] | None] = []
        for i, (p, st) in enumerate(zip(self.params, entries, strict=False)):
            if st is None:
                new.append(None)
                continue
            for key in ("m", "v"):
                arr = np.asarray(st[key])
                if arr.shape != p.shape:
                    raise ShapeError(
                        f"[AdamW.load_state_dict] state[{i}][{key!r}] has shape {arr.shape}; "
                        f"parameter {i} has {p.shape}"
                    )
            backend = p.backend
            new.append({
                "m": backend.from_numpy(np.ascontiguousarray(st["m"], dtype=p.dtype)),
                "v": backend.from_numpy(np.ascontiguousarray(st["v"], dtype=p.dtype)),
                "step": int(st["step"]),
            })  # fmt: skip
        self.state = new
        self.lr = float(state.get("lr", self.lr))
        self.betas = tuple(float(b) for b in state.get("betas", self.betas))  # type: ignore[assignment]
        self.eps = float(state.get("eps", self.eps))
        self.weight_decay = float(state.get("weight_decay", self.weight_decay))


def clip_grad_norm(params: Iterable[Variable], max_norm: float) -> Tensor:
    """Scale all gradients so their global L2 norm is at most ``max_norm``.

    Returns the norm before clipping as a 0-d Tensor; call ``.item()`` to read it. When
    every gradient lives on one backend in one dtype (a training run), the norm, the scale
    ``max_norm / max(norm + 1e-6, max_norm)`` and the rescaling all stay on the device: no
    download, so a GPU step never waits on the host here. The gradients are concatenated
    into one vector first, so the norm is one product and one sum and the rescaling one
    product, whatever the number of parameters: per parameter, a kernel backend would
    launch a product, a sum, an accumulation, a broadcast copy of the scale and a product
    (269 of a 603-launch Metal step for the `make train` model, against 115 this way: the
    concatenation and the split back copy each gradient once, at the cost of two
    transient copies of all gradients). Gradients spread over several backends or dtypes
    need their partial norms summed on the host (one download each).

    Clipping for AdamW is cheaper without this function: ``AdamW.step(grad_norm=
    grad_norm(params), max_norm=...)`` applies the same scale inside the update (no
    scaling pass, no split) and gives the same bits.
    """
    grads = [p for p in params if p.grad is not None]
    if not grads:
        return _host_scalar()
    if len({(id(_grad(p).backend), _grad(p).dtype) for p in grads}) > 1:
        return _clip_on_host(grads, max_norm)
    norm, flat, sized = _flat_norm(grads)
    if flat is None:
        return norm
    limit = ops.full_like(norm, float(max_norm), ())
    # scale = max_norm / max(norm + eps, max_norm): exactly 1 below the limit
    factor = ops.div(limit, ops.maximum(ops.add_scalar(norm, CLIP_EPS), limit))
    scaled = ops.mul(flat, factor.reshape((1,)).broadcast_to(flat.shape))
    sizes = [_grad(p).size for p in sized]
    parts = ops.split_last_axis(scaled, sizes) if len(sized) > 1 else [scaled]
    for p, part in zip(sized, parts, strict=True):
        p.grad = part.reshape(_grad(p).shape)
    return norm


def grad_norm(params: Iterable[Variable]) -> Tensor:
    """The global L2 norm of the gradients, as ``clip_grad_norm`` computes it (same bits),
    without scaling anything: a 0-d device tensor when every gradient lives on one backend
    in one dtype (nothing is read back), else a float64 cpu scalar summed on the host."""
    grads = [p for p in params if p.grad is not None]
    if not grads:
        return _host_scalar()
    if len({(id(_grad(p).backend), _grad(p).dtype) for p in grads}) > 1:
        return _host_scalar(_host_norm(grads))
    return _flat_norm(grads)[0]


def _flat_norm(grads: list[Variable]) -> tuple[Tensor, Tensor | None, list[Variable]]:
    """``(norm, flat, sized)``: the norm on the device, the non-empty gradients
    concatenated into one vector (None when there are none) and their Variables."""
    sized = [p for p in grads if _grad(p).size]  # empty gradients have nothing to scale
    pieces = [_grad(p).contiguous().reshape(-1) for p in sized]
    if not pieces:
        return ops.full_like(_grad(grads[0]), 0.0, ()), None, sized  # the norm of nothing
    flat = ops.concatenate_last_axis(pieces) if len(pieces) > 1 else pieces[0]
    return ops.sqrt(ops.sum(ops.mul(flat, flat))), flat, sized


def _norm_on(norm: Tensor, like: Tensor) -> Tensor:
    """``norm`` where ``like`` lives, in its dtype (one download only when it is not)."""
    if norm.backend is like.backend and norm.dtype == like.dtype:
        return norm
    return ops.full_like(like, float(norm.item()), ())


def _clip_on_host(grads: list[Variable], max_norm: float) -> Tensor:
    """Gradients on several backends or in several dtypes: one partial norm per group,
    summed on the host; each gradient is scaled where it lives."""
    norm_value = _host_norm(grads)
    scale = float(max_norm) / (norm_value + 1e-6)
    if scale < 1.0:
        for p in grads:
            p.grad = ops.mul_scalar(_grad(p), scale)
    return _host_scalar(norm_value)


def _host_norm(grads: list[Variable]) -> float:
    """One partial sum of squares per (backend, dtype), added up on the host."""
    totals: dict[tuple[int, Any], Tensor] = {}
    for p in grads:
        g = _grad(p)
        sq = ops.sum(ops.mul(g, g))
        key = (id(g.backend), g.dtype)
        totals[key] = sq if key not in totals else ops.add(totals[key], sq)
    return math.sqrt(sum(float(t.item()) for t in totals.values()))


def _grad(p: Variable) -> Tensor:
    assert p.grad is not None  # filtered above
    return p.grad


def _host_scalar(value: float = 0.0) -> Tensor:
    """A 0-d float64 cpu tensor: the norm when it had to be summed on the host."""
    from .creation import tensor

    return tensor(np.float64(value), device="cpu")
