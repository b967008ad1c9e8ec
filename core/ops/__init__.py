"""riftco.ops: every raw tensor operation, one op unit per module.

``primitive/`` holds the required protocol methods (memory, elementwise, reductions,
matmul, layout), ``fused/`` the optional ones (GELU, softmax, LayerNorm, embedding, cross
entropy, both attentions, AdamW). Each module keeps everything riftco knows about its op:
the typed protocol method and its semantics, the metadata checks, the composite fallback,
the VJP and the tolerances (see ``opunit.py``); its conformance samples sit beside it in
``_samples/``, loaded only when conformance or a test asks. The functions here
validate, then dispatch to the operands' backend (``dispatch.py``); none builds a graph.

A new op is one module in ``primitive/`` or ``fused/`` that calls ``register``: it is found
by the discovery below, so dispatch, autograd, conformance, ``riftco backends`` and the
docs table see it without further edits.
"""

# ruff: noqa: F401  (the imports are the export list: __all__ is computed from them below)
from __future__ import annotations

import importlib
import pkgutil
import sys
from typing import Any

from .. import tensor as _tensor
from . import fused, primitive  # noqa: I001  (primitives register first: fused modules import them)
from .checks import same_backend
from .deferred import flush as flush_deferred
from .dispatch import Out
from .fused.adam import adam_update
from .fused.adam_multi import adam_update_multi
from .fused.add_layer_norm import add_layer_norm, add_layer_norm_backward
from .fused.attention import attention, attention_backward
from .fused.attention_qkv import attention_qkv, attention_qkv_backward
from .fused.cross_entropy import cross_entropy, cross_entropy_backward
from .fused.embedding import embedding, embedding_backward
from .fused.flash_attention import flash_attention, flash_attention_backward
from .fused.gelu import gelu, gelu_backward
from .fused.layer_norm import layer_norm, layer_norm_backward
from .fused.linear import linear, linear_backward
from .fused.linear_gelu import linear_gelu, linear_gelu_backward
from .fused.rms_norm import rms_norm, rms_norm_backward
from .fused.softmax import softmax, softmax_backward
from .opunit import OpUnit, register, unit, units
from .primitive.binary import (
    add,
    add_scalar,
    div,
    maximum,
    minimum,
    mul,
    mul_scalar,
    pow_scalar,
    sub,
)
from .primitive.layout import concatenate_last_axis, split_last_axis
from .primitive.matmul import matmul
from .primitive.memory import (
    allocate,
    assign_,
    contiguous,
    copy_strided,
    download,
    fill_,
    full_like,
    upload,
)
from .primitive.reduce import argmax, max, mean, sum, sum_to_shape
from .primitive.select import COMPARE_OPS, cast, compare, where
from .primitive.unary import abs, exp, log, neg, rsqrt, sqrt, tanh


def _discover() -> None:
    """Import every op module of ``primitive/`` and ``fused/`` (each registers its units):
    the packages import those their ``MODULES`` list, this finds any other."""
    for package in (primitive, fused):
        for info in pkgutil.iter_modules(package.__path__):
            if not info.name.startswith("_"):
                importlib.import_module(f"{package.__name__}.{info.name}")


_discover()


def composite(op: str) -> Any:
    """Core's composite of the fused op ``op`` (primitives only), e.g. to compare a
    backend's native kernel with it; raises for required ops, which have none."""
    fn = unit(op).composite
    if fn is None:
        raise KeyError(f"[ops] {op!r} is a required op: it has no composite")
    return fn


def is_native(backend: Any, op: str) -> bool:
    """True when ``backend`` runs ``op`` with its own method (not core's composite)."""
    return unit(op).is_native(backend)


def __getattr__(name: str) -> Any:
    """A registered op that this module does not list (a newly added unit module)."""
    for u in units():
        if u.name == name and u.function is not None:
            return u.function
    raise AttributeError(f"module 'riftco.ops' has no attribute {name!r}")


_tensor.LAYERS.ops = sys.modules[__name__]  # Tensor's operators and numpy() call into us

#: What riftco.ops offers besides the op functions.
_API = ["OpUnit", "Out", "register", "unit", "units", "is_native", "composite", "same_backend",
        "flush_deferred", "COMPARE_OPS"]  # fmt: skip
#: The API, then every op function imported above: the imports are the one list of them
#: (type checkers and editors read those; this only repeats them for ``import *``).
__all__ = _API + [
    name
    for name, value in list(globals().items())
    if not name.startswith("_")
    and getattr(value, "__module__", "").startswith(("riftco.ops.primitive.", "riftco.ops.fused."))
]
