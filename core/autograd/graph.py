"""Graph nodes, traversal, versions and the isolated gradient context.

In the C++ original a ``Variable`` is a handle holding a ``shared_ptr`` to a node. In
Python every reference already is such a handle, so :class:`Variable` *is* the node: one
object per operation keeps the per-op cost low. Ownership runs one way only, child ->
parent (``_parents``) and node -> saved tensors (``_backward`` closure); a rule never
captures its output node, so a graph has no cycle and dies with its last handle.

``backward()`` works in three phases: collect the reachable nodes (iterative depth-first
postorder, no recursion limit), validate every recorded version and pending value check,
then run the local rules in reverse order into a private ``dict``. Public ``.grad`` fields
are written only after the whole pass succeeded, so a failing rule leaves every gradient
as it was and a repeated ``backward()`` gives the same gradients.

A rule may *fold* (``rule.fold = i``, see :func:`_folded`): it is then called with the
gradient its parent ``i`` has gathered so far and returns that parent's total, which lets a
fused backward (``add_layer_norm``'s) do the accumulating add in its own pass.

Versions validated in phase two: every parent a rule reads (recorded when the node was
made), the root's own value (a rule such as ``exp``'s reads its saved output, which is the
root's value, so writing ``y`` in place before ``y.backward(seed)`` is as stale as writing
an intermediate), and whatever a rule declares through a ``precheck`` attribute (a
callable taking the node and raising :class:`StaleGraphError`): recompute regions use it
for the tensors their replay will read again.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .. import ops
from ..errors import DeviceMismatchError, DTypeError, GradientError, ShapeError, StaleGraphError
from ..ops.capture_hooks import bump_generation, published
from ..tensor import Tensor
from . import domain

Rule = Callable[[Tensor], Sequence["Tensor | None"]]

_seq = itertools.count(1)  # creation stamps: recompute() tells its own nodes from outer ones


class _ReadsState(threading.local):
    """The read log of the recompute region whose forward is running (None: no region).

    ``make`` adds every parent Variable it sees, keyed by identity, with its version at
    the first read; a raw Tensor operand reaches ``make`` wrapped as a constant leaf, so
    it is logged too. Per thread like ``_GradMode``."""

    log: dict[int, tuple[Variable, int]] | None = None


class _GradModeState(threading.local):
    """Per thread, as PyTorch's grad mode: one thread evaluating under ``no_grad`` must not
    stop another from recording its graph (docs/DECISIONS.md, "Threads sharing a device")."""

    enabled = True


_Reads = _ReadsState()
_GradMode = _GradModeState()


@contextmanager
def no_grad() -> Iterator[None]:
    """Build no graph inside the block (evaluation, optimizer arithmetic)."""
    prev, _GradMode.enabled = _GradMode.enabled, False
    try:
        yield
    finally:
        _GradMode.enabled = prev


@contextmanager
def enable_grad() -> Iterator[None]:
    prev, _GradMode.enabled = _GradMode.enabled, True
    try:
        yield
    finally:
        _GradMode.enabled = prev


def _describe(v: Variable) -> str:
    name = f"{v.name!r} " if v.name else ""
    kind = "parameter" if v._backward is None else f"output of {v._op}"
    return f"Variable {name}(shape {v._value.shape}, {kind})"


class Variable:
    """A Tensor in the autograd graph: value, gradient, parents and the local VJP rule."""

    __slots__ = (
        "_value", "grad", "requires_grad", "name", "_parents", "_versions", "_backward",
        "_op", "_vbase", "_retain", "_seq", "_born", "__weakref__",
    )  # fmt: skip

    def __init__(self, value: Tensor, requires_grad: bool = False, name: str | None = None) -> None:
        if isinstance(value, Variable):
            value = value._value
        if not isinstance(value, Tensor):
            raise DTypeError(
                f"[Variable] value must be a riftco Tensor; got {type(value).__name__}"
            )
        if requires_grad and value.dtype.kind != "f":
            raise DTypeError(f"[Variable] only float tensors can require grad; got {value.dtype}")
        self._value = value
        self.grad: Tensor | None = None
        self.requires_grad = bool(requires_grad)
        self.name = name
        self._parents: tuple[Variable, ...] = ()
        self._versions: tuple[int, ...] = ()
        self._backward: Rule | None = None
        self._op = "leaf"
        self._vbase = 0
        self._retain = False
        self._seq = next(_seq)
        self._born = value.storage.version

    # -- value and version ----------------------------------------------------------------
    @property
    def value(self) -> Tensor:
        return self._value

    @value.setter
    def value(self, tensor: Tensor) -> None:
        self.assign(tensor)

    @property
    def version(self) -> int:
        """Replacement counter folded with the storage version: strictly increasing.

        ``assign`` swaps the Tensor, whose storage has its own counter, so the offset
        ``_vbase`` is moved to keep the sum above every value it had before; in-place writes
        (optimizer steps, ``ops.assign_``) bump the storage counter itself."""
        return self._vbase + self._value.storage.version

    def _replace(self, tensor: Tensor) -> None:
        old = self.version
        self._value = tensor
        self._vbase = old + 1 - tensor.storage.version

    def assign(self, tensor: Tensor) -> Variable:
        """Replace the value (same shape, dtype, backend); graphs that read it go stale."""
        if isinstance(tensor, Variable):
            tensor = tensor._value
        if not isinstance(tensor, Tensor):
            raise DTypeError(f"[assign] expects a Tensor; got {type(tensor).__name__}")
        v = self._value
        if tensor.shape != v.shape or tensor.dtype != v.dtype:
            raise ShapeError(
                f"[assign] new value {tensor.shape} {tensor.dtype} must match "
                f"{v.shape} {v.dtype} of {_describe(self)}"
            )
        if tensor.backend is not v.backend:
            raise DeviceMismatchError(
                f"[assign] new value lives on {tensor.device}, the Variable on {v.device}; "
                "use Variable.to() to move a Variable"
            )
        self._replace(tensor)
        return self

    def to(self, device: Any) -> Variable:
        """Move this Variable's value to ``device`` in place (a parameter move).

        The version is bumped so graphs recorded on the old device become stale; the
        gradient is dropped because it lives on the old device."""
        moved = self._value.to(device)
        if moved is not self._value:
            self._replace(moved)
            self.grad = None
            bump_generation()  # a captured step that read it on the old device records again
        return self

    # -- metadata -----------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self._value.shape

    @property
    def dtype(self) -> Any:
        return self._value.dtype

    @property
    def ndim(self) -> int:
        return len(self._value.shape)

    @property
    def size(self) -> int:
        return self._value.size

    @property
    def device(self) -> Any:
        return self._value.device

    @property
    def backend(self) -> Any:
        return self._value.backend

    @property
    def is_leaf(self) -> bool:
        return self._backward is None

    def numpy(self) -> Any:
        domain.flush()
        return self._value.numpy()

    def item(self) -> float | int:
        domain.flush()
        return self._value.item()

    def __repr__(self) -> str:
        name = f", name={self.name!r}" if self.name else ""
        shape = "x".join(map(str, self.shape)) or "scalar"
        return (
            f"Variable(shape={shape}, dtype={self.dtype.name}, device={self.device}, "
            f"requires_grad={self.requires_grad}, op={self._op}{name})"
        )

    def detach(self) -> Variable:
        """Same value, no graph, no gradient."""
        return Variable(self._value)

    def retain_grad(self) -> Variable:
        """Also commit this non-leaf's gradient at the next backward()."""
        self._retain = True
        return self

    if TYPE_CHECKING:  # installed by riftco.autograd from each op's module; typed here

        def __add__(self, other: Any) -> Variable: ...
        def __radd__(self, other: Any) -> Variable: ...
        def __sub__(self, other: Any) -> Variable: ...
        def __rsub__(self, other: Any) -> Variable: ...
        def __mul__(self, other: Any) -> Variable: ...
        def __rmul__(self, other: Any) -> Variable: ...
        def __truediv__(self, other: Any) -> Variable: ...
        def __rtruediv__(self, other: Any) -> Variable: ...
        def __neg__(self) -> Variable: ...
        def __pow__(self, p: Any) -> Variable: ...
        def __matmul__(self, other: Any) -> Variable: ...
        def __rmatmul__(self, other: Any) -> Variable: ...
        def __getitem__(self, index: Any) -> Variable: ...
        def sum(self, axes: Any = None, keepdims: bool = False) -> Variable: ...
        def astype(self, dtype: Any) -> Variable: ...
        def mean(self, axes: Any = None, keepdims: bool = False) -> Variable: ...
        def max(self, axes: Any = None, keepdims: bool = False) -> Variable: ...
        def reshape(self, *shape: Any) -> Variable: ...
        def transpose(self, a: int = -2, b: int = -1) -> Variable: ...
        def permute(self, *axes: Any) -> Variable: ...
        def broadcast_to(self, *shape: Any) -> Variable: ...
        def sum_to_shape(self, shape: Any) -> Variable: ...
        def exp(self) -> Variable: ...
        def log(self) -> Variable: ...
        def sqrt(self) -> Variable: ...
        def tanh(self) -> Variable: ...
        def gelu(self, approximate: str = "tanh") -> Variable: ...
        def softmax(self) -> Variable: ...
        @property
        def T(self) -> Variable: ...  # noqa: N802

    def backward(self, seed: Tensor | None = None) -> None:
        """Replace ``.grad`` of every reachable leaf (and retained node) with d(self)/d(leaf)."""
        if not self.requires_grad:
            raise GradientError(
                f"[backward] {_describe(self)} does not require grad: no input of its graph "
                "has requires_grad=True (or it was built under no_grad)"
            )
        seed = _check_seed(self, seed)
        grads, order = vjp(self, seed)
        final = []  # dense, as optimizers and checkpoint writers expect; all made before any
        for node in order:  # is published, so a failing copy still changes nothing
            if node._backward is None or node._retain:
                g = grads.get(node)
                final.append((node, _zeros(node._value) if g is None else g.contiguous()))
        for node, g in final:
            published(node, g)


def make(
    value: Tensor, op: str, parents: tuple[Variable, ...], rule: Rule, needed: bool | None = None
) -> Variable:
    """The output node of one differentiable op (graph recorded only when it is needed).

    ``needed`` is whether any parent requires grad, when the caller already knows it."""
    out = Variable.__new__(Variable)
    out._value = value
    out.grad = None
    out.name = None
    out._vbase = 0
    out._retain = False
    out._op = op
    out._born = value.storage.version  # _vbase is 0: the version the rules saw
    log = _Reads.log
    if log is not None:
        for q in parents:
            if id(q) not in log:
                log[id(q)] = (q, q._vbase + q._value.storage.version)
    if needed is None:
        needed = any(p.requires_grad for p in parents)
    if needed and _GradMode.enabled:
        out.requires_grad = True
        out._parents = parents
        out._versions = tuple([p._vbase + p._value.storage.version for p in parents])
        out._backward = rule
        out._seq = next(_seq)
    else:
        out.requires_grad = False
        out._parents = ()
        out._versions = ()
        out._backward = None
        out._seq = 0
    return out


def _zeros(like: Tensor) -> Tensor:
    out: Tensor = like.backend.allocate(like.shape, like.dtype)
    like.backend.fill(out, 0.0)
    return out


def _check_seed(root: Variable, seed: Tensor | None) -> Tensor:
    v = root._value
    if seed is None:
        if v.size != 1:
            raise GradientError(
                f"[backward] output has shape {v.shape}; a non-scalar output needs an explicit "
                f"seed Tensor of shape {v.shape} on {v.device}"
            )
        out: Tensor = v.backend.allocate(v.shape, v.dtype)
        v.backend.fill(out, 1.0)
        return out
    if isinstance(seed, Variable):
        seed = seed._value
    if not isinstance(seed, Tensor):
        raise GradientError(f"[backward] seed must be a Tensor; got {type(seed).__name__}")
    if seed.shape != v.shape or seed.dtype != v.dtype:
        raise GradientError(
            f"[backward] seed of shape {seed.shape} and dtype {seed.dtype} must match the "
            f"output's shape {v.shape} and dtype {v.dtype}"
        )
    if seed.backend is not v.backend:
        raise GradientError(f"[backward] seed lives on {seed.device}, the output on {v.device}")
    return seed


def topo_order(
    root: Variable, stop: set[Variable] | frozenset[Variable] = frozenset()
) -> list[Variable]:
    """Reachable nodes requiring grad, parents before children; ``stop`` nodes are not expanded.

    Iterative depth-first postorder: a 10,000-op chain needs no recursion."""
    order: list[Variable] = []
    visited = {root}
    stack: list[tuple[Variable, Iterator[Variable]]] = [(root, iter(root._parents))]
    if root in stop:
        return [root]
    while stack:
        node, parents = stack[-1]
        for p in parents:
            if p.requires_grad and p not in visited:
                visited.add(p)
                if p in stop:
                    order.append(p)
                    continue
                stack.append((p, iter(p._parents)))
                break
        else:
            stack.pop()
            order.append(node)
    return order


def check_versions(order: Iterable[Variable]) -> None:
    """Raise StaleGraphError if any value a rule will read changed since its forward."""
    for node in order:
        rule = node._backward
        if rule is None:
            continue
        for p, recorded in zip(node._parents, node._versions, strict=False):
            now = p._vbase + p._value.storage.version
            if now != recorded:
                raise StaleGraphError(
                    f"[backward] stale graph: {_describe(p)} changed after {node._op} read it "
                    f"(version {recorded} at forward, {now} now; an optimizer step, assign() "
                    "or .to() replaced it); run the forward pass again"
                )
        precheck = getattr(rule, "precheck", None)
        if precheck is not None:
            precheck(node)


def check_root(root: Variable) -> None:
    """Raise StaleGraphError if the root's own value changed since the op made it.

    No other node records the root's version (it has no consumer), yet its rule may read
    it: ``exp`` and ``softmax`` save their output, which *is* the root's value."""
    if root._backward is None:
        return
    now = root._vbase + root._value.storage.version
    if now != root._born:
        raise StaleGraphError(
            f"[backward] stale graph: the output {_describe(root)} was written in place or "
            f"replaced after {root._op} made it (version {root._born} at forward, {now} now); "
            "run the forward pass again"
        )


def _accumulate(grads: dict[Variable, Tensor], node: Variable, p: Variable, g: Tensor) -> None:
    v = p._value
    if not isinstance(g, Tensor):
        raise GradientError(f"[{node._op}] backward rule returned {type(g).__name__}, not a Tensor")
    if g.backend is not v.backend:
        raise GradientError(
            f"[{node._op}] cross-backend gradient: contribution on {g.device} for "
            f"{_describe(p)} on {v.device}"
        )
    if g.shape != v.shape or g.dtype != v.dtype:
        raise GradientError(
            f"[{node._op}] gradient {g.shape} {g.dtype} does not match {_describe(p)} ({v.dtype})"
        )
    prev = grads.get(p)
    grads[p] = g if prev is None else ops.add(prev, g)


def vjp(
    root: Variable, seed: Tensor, stop: set[Variable] | frozenset[Variable] = frozenset()
) -> tuple[dict[Variable, Tensor], list[Variable]]:
    """Vector-Jacobian product into a fresh private context; nothing public is written.

    Returns the gradients of the leaves, the ``stop`` nodes and retained nodes, plus the
    traversal order. Re-entrant: recompute regions call it from inside a rule."""
    order = topo_order(root, stop)
    check_versions(order)  # first: it names a written parameter, which the root may view
    check_root(root)
    domain.flush()
    grads: dict[Variable, Tensor] = {root: seed}
    for node in reversed(order):
        rule = node._backward
        if rule is None or node in stop:
            continue
        g = grads.get(node) if node._retain else grads.pop(node, None)
        if g is None:  # no path delivered a contribution
            continue
        fold = getattr(rule, "fold", None)
        if fold is None:
            contributions = rule(g)
        else:  # the rule adds its parent's gradient so far into its own contribution
            contributions = _folded(rule, g, grads, node._parents[fold], fold)
        for p, c in zip(node._parents, contributions, strict=True):
            if c is not None and p.requires_grad:
                _accumulate(grads, node, p, c)
    return grads, order


def _folded(
    rule: Any, g: Tensor, grads: dict[Variable, Tensor], parent: Variable, at: int
) -> Sequence[Tensor | None]:
    """Run a folding rule (``rule.fold = i``): it takes the gradient parent ``i`` has
    gathered so far (None when no other reader has delivered one yet) and returns that
    parent's whole gradient, so one kernel does the sum autograd would do after it.

    In a pre-LN transformer the other reader of a LayerNorm's input is the next residual
    add, which depends on the LayerNorm's output and so has always run first."""
    prev = grads.pop(parent, None) if parent.requires_grad else None
    contributions = rule(g, prev)
    if prev is not None and contributions[at] is None:  # the rule declined: keep the sum
        grads[parent] = prev
    return contributions


def graph_stats(root: Variable) -> dict[str, int]:
    """Node count and elements of the distinct storages the graph keeps alive.

    Counts every reachable node's value and every Tensor a backward rule saved (found in
    its closure), each storage once, so activation recompute shows up as fewer
    retained elements."""
    seen = {root}
    todo = [root]
    storages: dict[int, int] = {}

    def keep(t: Any) -> None:
        if isinstance(t, Tensor):
            storages[id(t.storage)] = t.storage.size
        elif isinstance(t, (list, tuple)):
            for x in t:
                if isinstance(x, Tensor):
                    storages[id(x.storage)] = x.storage.size

    while todo:
        node = todo.pop()
        keep(node._value)
        rule = node._backward
        for cell in getattr(rule, "__closure__", None) or ():
            try:
                keep(cell.cell_contents)
            except ValueError:  # an empty cell
                pass
        for p in node._parents:
            if p not in seen:
                seen.add(p)
                todo.append(p)
    return {"nodes": len(seen), "retained_elements": sum(storages.values())}
