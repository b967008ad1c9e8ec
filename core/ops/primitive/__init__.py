"""The required protocol methods, one module per family.

``MODULES`` is their protocol order (memory first: the others use it); importing the
package registers them in it. ``riftco.ops`` still discovers a module missing from it
(registered last), and ``tests/ops/test_ops_lists.py`` fails until it is listed.
"""

import importlib

MODULES: tuple[str, ...] = ("memory", "select", "binary", "unary", "reduce", "matmul", "layout")

for _name in MODULES:
    importlib.import_module(f"{__name__}.{_name}")
