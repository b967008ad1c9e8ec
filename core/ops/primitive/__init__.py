"""The required protocol methods, one module per family (memory first: the rest use it)."""

from . import memory, select, binary, unary, reduce, matmul, layout  # noqa: F401,I001  (order)
