"""The optional fused protocol methods, one module per op (and its backward).

``MODULES`` is their protocol order, the order ``riftco backends``, conformance and the
docs table list them in; importing the package registers them in it. ``riftco.ops`` still
discovers a module missing from it (registered last), and ``tests/ops/test_new_op_checklist.py``
fails until it is listed.
"""

import importlib

MODULES: tuple[str, ...] = (
    "gelu", "softmax", "layer_norm", "embedding", "cross_entropy", "attention",
    "flash_attention", "adam", "linear", "attention_qkv", "adam_multi",
    "add_layer_norm", "linear_gelu", "rms_norm",
)  # fmt: skip

for _name in MODULES:
    importlib.import_module(f"{__name__}.{_name}")
