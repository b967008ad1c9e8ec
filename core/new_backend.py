"""``riftco new-backend NAME [DIR]``: the package a third-party backend starts from.

It writes what docs/BACKENDS.md asks of a backend package, so that nothing is missed:
the ``riftco`` entry point in ``pyproject.toml``, a plugin that names the backend with
:class:`riftco.LazyBackend` (the array library is imported only when the backend is used,
never by ``import riftco``), a backend class with every required method, each raising
``NotImplementedError`` until written (``riftco conformance NAME`` lists them all), and a
``tests/`` folder that runs the conformance suite through pytest, as the package's CI
would. The method stubs are generated from the op units, so they always match the
protocol of the riftco that wrote them.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from pathlib import Path

from .backend import PROTOCOL_VERSION
from .errors import RiftcoError
from .ops.opunit import units

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_")) + "Backend"


def _stub(method: str, signature: inspect.Signature, summary: str, name: str) -> str:
    sig = str(signature).replace("'", "")
    doc = summary.replace('"""', "'''").replace("\\", "\\\\")
    doc = textwrap.fill(doc, 92, initial_indent=" " * 8, subsequent_indent=" " * 8).strip()
    return (
        f"    def {method}{sig}:\n"
        f'        """{doc}"""\n'
        f'        raise NotImplementedError("[{name}] {method} is not implemented yet")\n'
    )


def backend_module(name: str) -> str:
    """The skeleton backend: every required method of this riftco's protocol, unwritten."""
    stubs = "\n".join(
        _stub(u.name, inspect.signature(u.method), u.summary, name)
        for u in units()
        if u.kind != "fused"
    )
    optional = textwrap.fill(
        "required methods; the optional fused ones, native once defined, are "
        + ", ".join(u.name for u in units("fused")),
        92,
        initial_indent="    # -- ",
        subsequent_indent="    # ",
    )
    major, minor = PROTOCOL_VERSION
    return f'''"""The {name} backend: one class implementing riftco's Backend protocol.

Each method's full specification is the docstring of its op unit (``riftco ops`` lists
the files; docs/BACKENDS.md walks through them). Write them one by one and run
``riftco conformance {name} --ops NAME`` after each; ``riftco conformance {name}`` lists
every method still raising NotImplementedError.

Import your array library at the top of this module: riftco imports this module only when
the {name} backend is asked for (the plugin names it with riftco.LazyBackend).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np
from riftco import BackendBase, DeviceInfo, Tensor


class {_camel(name)}(BackendBase):
    name: ClassVar[str] = "{name}"
    #: "auto" picks the available backend with the highest priority (cpu is 0); keep it
    #: negative until conformance passes, and equal to the plugin's LazyBackend priority.
    priority: ClassVar[int] = -10
    #: the riftco protocol this class implements (riftco refuses another major number)
    protocol_version: ClassVar[tuple[int, int]] = ({major}, {minor})
    #: every dtype the backend holds: float32 (float64 if it has it) and the index dtypes
    #: it accepts for embedding ids and cross-entropy targets (int32 and/or int64)
    dtypes: ClassVar[frozenset[np.dtype]] = frozenset(
        {{np.dtype(np.float32), np.dtype(np.int32)}}
    )
    #: False: core hands every method dense operands (offset 0, C order)
    accepts_strided: ClassVar[bool] = False

    @classmethod
    def is_available(cls) -> tuple[bool, str]:
        """Probe the library and the device here, never at import; never raise."""
        return True, ""

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        return [DeviceInfo(0, "{name} device 0", ("float32", "int32"))]

{optional}

{stubs}'''


def _files(name: str) -> dict[str, str]:
    package, dist = f"riftco_{name}", f"riftco-{name.replace('_', '-')}"
    cls = _camel(name)
    return {
        "pyproject.toml": f'''[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "The {name} backend for riftco"
requires-python = ">=3.10"
dependencies = ["riftco"]  # and your array library

[project.optional-dependencies]
test = ["riftco[conformance]", "pytest"]

[project.entry-points.riftco]
{name} = "{package}.plugin"

[tool.setuptools]
packages = ["{package}"]

[tool.pytest.ini_options]
testpaths = ["tests"]
# the conformance suite on this backend; CI may raise the examples (--conformance-...)
addopts = ["--backend={name}", "--conformance-max-examples=10"]
''',
        f"{package}/__init__.py": f'"""The {name} backend for riftco."""\n',
        f"{package}/plugin.py": f'''\
"""The plugin riftco loads through its ``riftco`` entry point (pyproject.toml).

It names the backend without importing it: ``{package}.backend`` (and the library it
imports) loads only when the {name} backend is asked for, never by ``import riftco``.
Name and priority must equal the class's.
"""

import riftco


@riftco.hookimpl
def riftco_backends() -> list[riftco.LazyBackend]:
    return [riftco.LazyBackend("{name}", "{package}.backend:{cls}", priority=-10)]
''',
        f"{package}/backend.py": backend_module(name),
        "tests/test_conformance.py": f'''\
"""riftco's conformance suite on {name}, one pytest test per case.

``pytest`` runs it (pyproject.toml passes ``--backend={name}``); narrow it with
``--conformance-ops 'softmax*'``, widen it with ``--conformance-max-examples 100``. The
fixture ``riftco_conformance_case`` comes from riftco's pytest plugin, installed with
riftco[conformance].
"""

from typing import Any

from riftco.conformance.pytest_plugin import run_case


def test_conformance(riftco_conformance_case: Any) -> None:
    run_case(riftco_conformance_case)
''',
        "README.md": f"""# {dist}

The {name} backend for riftco, started from `riftco new-backend {name}`.

```sh
pip install -e '.[test]'
riftco backends                       # lists {name}
riftco conformance {name}             # names every method still to write
pytest                                # the same suite as pytest tests (tests/)
riftco conformance {name} --html certificate.html   # once it passes: publish this
```
""",
    }


def write(name: str, folder: str | Path | None = None) -> Path:
    """Write the package for backend ``name`` into ``folder`` (default ``./riftco-NAME``)."""
    if not _NAME.match(name):
        raise RiftcoError(
            f"[new-backend] backend name {name!r}: use lower-case letters, digits and "
            "underscores, starting with a letter (it names the package riftco_NAME)"
        )
    root = Path(folder) if folder is not None else Path(f"riftco-{name.replace('_', '-')}")
    files = _files(name)
    taken = [rel for rel in files if (root / rel).exists()]
    if taken:
        raise RiftcoError(
            f"[new-backend] {root} already holds {', '.join(taken)}; "
            "choose another folder (nothing was written)"
        )
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root
