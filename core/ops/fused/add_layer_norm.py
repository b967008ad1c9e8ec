"""A residual add fused with the LayerNorm that reads its sum, forward and backward.

In a pre-LN transformer every residual add ``s = x + r`` is read at once by a LayerNorm
(the next sub-block's, or the final one) and carried on as the residual stream. Unfused,
the add writes ``s``, the LayerNorm reads it back, and in backward the stream's gradient
and the LayerNorm's ``dx`` meet in a third pass (autograd's accumulation). Here one call
makes ``s`` and the normalised rows from one read of ``x`` and ``r``, and one backward call
returns ``ds + dx_ln``: the gradient of ``s`` (and so of ``x`` and of ``r``) with the
stream's gradient folded in. Protocol 1.3.

The numbers are those of the unfused ops: ``s`` is ``x + r`` rounded to the dtype, the
LayerNorm is ``layer_norm`` of that ``s``, and the folded gradient is ``ds + dx_ln`` with
``dx_ln`` rounded first, so a backend that reuses its own ``layer_norm`` code gives the
bits the unfused graph gave.
"""

from __future__ import annotations

from typing import Any, Protocol

from ...dtypes import compute_dtype
from ...tensor import Tensor
from .. import checks
from ..dispatch import Out, dispatch
from ..opunit import OpUnit, register, samples_module
from ..primitive.binary import add
from .layer_norm import (
    LAYER_NORM,
    LAYER_NORM_BACKWARD,
    check_affine,
    check_saved,
    layer_norm,
    layer_norm_backward,
)

_SAMPLES = samples_module(__name__)


class AddLayerNormMethods(Protocol):
    def add_layer_norm(
        self, x: Tensor, r: Tensor, gamma: Tensor, beta: Tensor, eps: float
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(s, y, mean, rstd)``: ``s = x + r`` and ``layer_norm(s, gamma, beta, eps)``.

        ``x`` and ``r`` are ``[..., C]`` (C >= 1) of one shape, ``gamma`` and ``beta``
        ``[C]``; ``s`` and ``y`` have ``x``'s shape, ``mean`` and ``rstd`` shape
        ``x.shape[:-1]``; ``mean`` and ``rstd`` in the compute dtype (float32 for
        float16/bfloat16), the rest in ``x.dtype``. ``s`` is the sum rounded to the dtype
        (what ``add`` returns) and the statistics are those of that rounded ``s``, computed as
        ``layer_norm`` computes them (biased, stable variance; ``rstd = 1/sqrt(var + eps)``).
        NaN or Inf in a row of ``x`` or ``r`` gives that element of ``s`` by IEEE and a NaN
        row of ``y`` with NaN statistics (Inf - Inf); other rows are unaffected.

        Special values: ``s`` by IEEE addition (``inf + -inf`` is NaN); ``y``, ``mean`` and
        ``rstd`` those of ``layer_norm`` on ``s``: a NaN in a row of ``s`` makes its row of
        ``y`` and its statistics NaN, a ``+-inf`` its ``mean`` ``+-inf`` (NaN with both
        signs) and its ``rstd`` and ``y`` NaN. ``-0.0`` is 0.0. Zero rows give empty
        results; C = 0 is refused by core.

        Composite: ``add``, then ``layer_norm`` (your native one when you define it)."""
        ...

    def add_layer_norm_backward(
        self, dy: Tensor, ds: Tensor, s: Tensor, gamma: Tensor, mean: Tensor, rstd: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(dsum, dgamma[C], dbeta[C])`` from the forward's ``s`` and statistics.

        ``dsum = ds + dx`` where ``(dx, dgamma, dbeta) = layer_norm_backward(dy, s, gamma,
        mean, rstd)`` and ``ds`` is the gradient ``s`` received from its other readers (the
        residual stream): the gradient of ``s``, hence of both ``x`` and ``r``. ``dx`` is
        rounded to the dtype before ``ds`` is added (so the result equals the unfused
        ``add(ds, dx)`` bit for bit where ``dx`` does). ``dy``, ``ds`` and ``s`` share one
        shape; dgamma and dbeta are column sums over every row (zeros for zero rows),
        deterministic.

        Special values: those of ``layer_norm_backward`` (a NaN or infinity in a row of
        ``dy`` or ``s`` makes that row NaN and reaches ``dgamma`` and ``dbeta``), then IEEE
        addition of ``ds``. ``-0.0`` is 0.0. Zero rows give an empty ``dsum`` and zero
        ``dgamma`` and ``dbeta``.

        Composite: ``layer_norm_backward`` (your native one when you define it), then
        ``add``."""
        ...


def add_layer_norm(
    x: Tensor, r: Tensor, gamma: Tensor, beta: Tensor, eps: float = 1e-5
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``s = x + r`` and the LayerNorm of ``s`` in one call (metadata checked first)."""
    op = "add_layer_norm"
    backend = checks.float_operands(op, x, r, gamma, beta)
    c = checks.features(op, x)
    checks.shape_is(op, r, x.shape, "r")
    eps = check_affine(op, c, gamma, beta, eps)
    full, stat = Out(x.shape, x.dtype), Out(x.shape[:-1], compute_dtype(x.dtype))
    return dispatch(ADD_LAYER_NORM, backend, (x, r, gamma, beta, eps), (full, full, stat, stat))


def add_layer_norm_backward(
    dy: Tensor, ds: Tensor, s: Tensor, gamma: Tensor, mean: Tensor, rstd: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """The gradient of ``s`` (LayerNorm's ``dx`` plus the stream's ``ds``), dgamma, dbeta."""
    op = "add_layer_norm_backward"
    backend = checks.float_operands(op, dy, ds, s, gamma)
    checks.statistics(op, s, mean=mean, rstd=rstd)
    c = checks.features(op, s)
    checks.shape_is(op, dy, s.shape, "dy")
    checks.shape_is(op, ds, s.shape, "ds")
    check_saved(op, s, gamma, mean, rstd)
    param = Out((c,), s.dtype)
    expect = (Out(s.shape, s.dtype), param, param)
    return dispatch(ADD_LAYER_NORM_BACKWARD, backend, (dy, ds, s, gamma, mean, rstd), expect)


def add_layer_norm_composite(
    x: Tensor, r: Tensor, gamma: Tensor, beta: Tensor, eps: float
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The unfused pair: ``add``, then ``layer_norm`` (native where the backend has it)."""
    s = add(x, r)
    y, mu, rs = layer_norm(s, gamma, beta, eps)
    return s, y, mu, rs


def add_layer_norm_backward_composite(
    dy: Tensor, ds: Tensor, s: Tensor, gamma: Tensor, mu: Tensor, rs: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """``layer_norm_backward``, then ``add(ds, dx)``: autograd's accumulation, in its order."""
    dx, dgamma, dbeta = layer_norm_backward(dy, s, gamma, mu, rs)
    return add(ds, dx), dgamma, dbeta


def _cost(n: int) -> Any:
    return lambda args: ((n + 1) * args[0].nbytes, 9 * args[0].size)


ADD_LAYER_NORM = OpUnit(
    "add_layer_norm", "fused", AddLayerNormMethods.add_layer_norm, module="add_layer_norm",
    function=add_layer_norm, outputs=("s", "y", "mean", "rstd"),
    composite=add_layer_norm_composite,
    nan="a NaN in x or r makes that element of s NaN and its row of y and statistics NaN",
    tolerance=LAYER_NORM.tolerance, cost=_cost(3), testing=_SAMPLES,  # layer_norm's rounding
    since=(1, 3),
)  # fmt: skip
ADD_LAYER_NORM_BACKWARD = OpUnit(
    "add_layer_norm_backward", "fused",
    AddLayerNormMethods.add_layer_norm_backward, module="add_layer_norm",
    function=add_layer_norm_backward,
    outputs=("dsum", "dgamma", "dbeta"), composite=add_layer_norm_backward_composite,
    tolerance=LAYER_NORM_BACKWARD.tolerance, cost=_cost(5), testing=_SAMPLES,
    since=(1, 3),
)  # fmt: skip

register(ADD_LAYER_NORM, ADD_LAYER_NORM_BACKWARD)
