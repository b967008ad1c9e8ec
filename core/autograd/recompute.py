"""Activation recomputation: keep a region's boundary, compute its inside again on backward.

PyTorch calls this activation checkpointing and JAX ``remat``; riftco says *recompute* so that
"checkpoint" means only a training run saved to disk (``riftco.train.checkpoint``) and
"replay" only a captured step (``riftco.capture``).

``recompute(fn, inputs, params)`` runs ``fn(*inputs)`` on fresh leaves, checks the graph
it built, and keeps only the result plus references to its boundary (the inputs' values
and the declared parameters); the region's intermediates die with the forward graph.
During backward the rule recomputes ``fn`` on new leaves and runs a *nested* VJP in its own
private context (``graph.vjp`` with the boundary as stop nodes). It returns the second run's
inputs' and parameters' gradients to the outer pass, which accumulates them like any
other contribution, so several blocks sharing parameters add up correctly: an ordinary
nested ``backward()`` would instead replace gradients other blocks already produced.

Checked, each with a clear GradientError: inputs and params are unique; everything the
region's result depends on that requires grad is a declared input or parameter (no
captured outer graph state, no fresh leaves made inside ``fn``); the second run gives the same
shape, dtype and backend, and reaches the same dependencies, as the first run. ``fn`` must
be deterministic (dropout would need its seed saved); that is the caller's contract.

Captured constants: ``fn`` may read tensors that need no gradient without declaring them
(a mask, a raw Tensor operand, a frozen Variable). The second run reads them *again*, so
writing one in place (or ``assign()``-ing a captured Variable) between forward and
backward would silently change the gradient, while an ordinary graph, whose rules keep
the values they saw, reports a stale graph. The first run therefore logs every Variable
an op inside the region reads (``graph._Reads``) with its version, and the node's
``precheck`` compares them during backward's validation phase, before any rule runs or
any gradient changes. The log keeps weak references only, so it holds no memory: a
tensor that died cannot be read by the second run either. It sees what goes through autograd
ops; a tensor ``fn`` touches only through raw ``riftco.ops`` is beyond it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from ..errors import DTypeError, GradientError, StaleGraphError
from ..tensor import Storage, Tensor
from . import graph
from .graph import Variable, _describe, _GradMode, _Reads, enable_grad, make, vjp

# (Variable, its storage, version of each at the first read, shape, name)
_Read = tuple["weakref.ref[Variable]", "weakref.ref[Storage]", int, int, tuple[int, ...], str]


def _fresh_leaves(values: Sequence[Tensor], flags: Sequence[bool]) -> list[Variable]:
    return [Variable(v, requires_grad=f) for v, f in zip(values, flags, strict=False)]


def _dependencies(out: Variable, boundary: list[Variable], start_seq: int) -> frozenset[int]:
    """Positions of the boundary nodes ``out`` reaches; reject anything undeclared.

    Walks down from ``out`` and stops at the first node that is neither a boundary node nor
    made inside the region, so the error names the captured node itself."""
    position = {node: i for i, node in enumerate(boundary)}
    reached = set()
    seen = {out}
    todo = [out]
    while todo:
        node = todo.pop()
        i = position.get(node)
        if i is not None:
            reached.add(i)
            continue
        if node._backward is None or node._seq < start_seq:
            raise GradientError(
                f"[recompute] captured graph state: the region's result depends on "
                f"{_describe(node)}, which requires grad but is neither one of its inputs "
                "nor a declared param; pass it in inputs or params"
            )
        for p in node._parents:
            if p.requires_grad and p not in seen:
                seen.add(p)
                todo.append(p)
    return frozenset(reached)


@contextmanager
def _logging_reads(log: dict[int, tuple[Variable, int]] | None) -> Iterator[None]:
    """Route ``make``'s read log to ``log``; an enclosing region also sees what was read."""
    outer, _Reads.log = _Reads.log, log
    try:
        yield
    finally:
        _Reads.log = outer
        if outer is not None and log is not None:
            for key, entry in log.items():
                outer.setdefault(key, entry)


def _captured(log: dict[int, tuple[Variable, int]], skip: Sequence[Variable]) -> list[_Read]:
    """Weak records of the constants the region read (boundary and graph nodes excluded).

    Nodes with a rule are the region's own (or rejected outer graph state); the boundary
    is checked as the recompute node's parents."""
    skipped = {id(x) for x in skip}
    out: list[_Read] = []
    for key, (v, version) in log.items():
        if key in skipped or v._backward is not None:
            continue
        storage = v._value.storage
        out.append(
            (weakref.ref(v), weakref.ref(storage), version, storage.version, v.shape, v.name or "")
        )
    return out


def _check_captured(reads: list[_Read]) -> None:
    """The recompute node's precheck: every captured constant still has its version."""
    for var_ref, storage_ref, version, storage_version, shape, name in reads:
        v = var_ref()
        if v is not None:  # replaced by assign()/.to(), or written in place
            now = v._vbase + v._value.storage.version
            if now != version:
                what = _describe(v)
                if not v.requires_grad:
                    what = what.replace(", parameter)", ", constant)")
                raise _stale(what, version, now)
        storage = storage_ref()  # a raw Tensor operand: its wrapper died, its storage lives
        if storage is not None and storage.version != storage_version:
            label = f"{name!r} " if name else ""
            raise _stale(
                f"captured tensor {label}(shape {shape})", storage_version, storage.version
            )


def _stale(what: str, then: int, now: int) -> StaleGraphError:
    return StaleGraphError(
        f"[backward] stale graph: {what}, read inside a recompute() region, changed after "
        f"the region's forward (version {then} at forward, {now} now); the second run would read "
        "the new value and give a wrong gradient: run the forward pass again"
    )


def recompute(
    fn: Callable[..., Variable], inputs: Sequence[Variable], params: Sequence[Variable]
) -> Variable:
    """``fn(*inputs)``, recomputed during backward instead of keeping its intermediates."""
    inputs, params = list(inputs), list(params)
    for what, group in (("inputs", inputs), ("params", params)):
        for i, x in enumerate(group):
            if not isinstance(x, Variable):
                raise DTypeError(
                    f"[recompute] {what}[{i}] must be a Variable; got {type(x).__name__}"
                )
    boundary_outer = inputs + params
    if len({id(x) for x in boundary_outer}) != len(boundary_outer):
        raise GradientError(
            "[recompute] inputs and params must be unique Variables (a dependency was listed twice)"
        )
    if not _GradMode.enabled:
        return fn(*inputs)
    values = [x._value for x in inputs]
    flags = [x.requires_grad for x in inputs]
    start = _next_seq()
    leaves = _fresh_leaves(values, flags)
    log: dict[int, tuple[Variable, int]] = {}
    with _logging_reads(log):
        out = fn(*leaves)
    if not isinstance(out, Variable):
        raise DTypeError(f"[recompute] fn must return a Variable; got {type(out).__name__}")
    reached = _dependencies(out, leaves + params, start) if out.requires_grad else frozenset()
    reads = _captured(log, leaves + params)
    del log
    result = out._value
    spec = (result.shape, result.dtype, result.backend)
    n_in = len(inputs)
    del out, leaves  # the region's graph dies here; only its result and boundary remain

    def rule(g: Tensor) -> list[Tensor | None]:
        with enable_grad(), _logging_reads(None):
            start_again = _next_seq()
            again_in = _fresh_leaves(values, flags)
            again = fn(*again_in)
            if not isinstance(again, Variable):
                raise GradientError("[recompute] the second run of fn did not return a Variable")
            v = again._value
            if (v.shape, v.dtype, v.backend) != spec:
                raise GradientError(
                    f"[recompute] the second run gave {v.shape} {v.dtype} on {v.device}; the first "
                    f"run gave {spec[0]} {spec[1]} on {spec[2].name}: fn must be deterministic"
                )
            boundary = again_in + params
            now = (
                _dependencies(again, boundary, start_again) if again.requires_grad else frozenset()
            )
            if now != reached:
                raise GradientError(
                    f"[recompute] the second run reached boundary positions {sorted(now)}, the "
                    f"first run {sorted(reached)}: fn must be deterministic"
                )
            if not again.requires_grad:
                return [None] * len(boundary)
            grads, _ = vjp(again, g, frozenset(boundary))
        return [grads.get(node) for node in boundary[:n_in]] + [grads.get(p) for p in params]

    def precheck(node: Variable) -> None:
        _check_captured(reads)

    rule.precheck = precheck  # type: ignore[attr-defined]  # read by graph.check_versions
    return make(result, "recompute", tuple(boundary_outer), rule)


def _next_seq() -> int:
    """A stamp no node made before now has (nodes made later get larger ones)."""
    return next(graph._seq)
