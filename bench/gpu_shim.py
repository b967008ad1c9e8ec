"""Make the working tree importable as ``riftco`` without pip (for machines with no network).

The device machine has Python, numpy, pluggy, pytest, hypothesis and cuda.bindings but no
registry to install from, and its setuptools may be too old for this pyproject. This builds,
under the folder given, what an editable install would provide:

    DIR/riftco/                    symlinks to core/* plus backends/, shaders/, conformance/
                                   (the package-dir mapping of pyproject.toml)
    DIR/riftco-<ver>.dist-info/    METADATA and entry_points.txt read from pyproject.toml,
                                   so the backend plugins and the pytest plugin register

and prints DIR; put it on PYTHONPATH. Refuses (exit 1) where riftco is already importable
from elsewhere, because two distributions would register every backend twice.

    python bench/gpu_shim.py /tmp/riftco-shim
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build(target: Path) -> Path:
    sys.path.insert(0, str(ROOT / ".ci"))  # .ci/links.py: the tree `make typecheck` builds too
    import links

    meta = links.project()["project"]
    if target.exists():
        shutil.rmtree(target)
    links.link_tree(target)
    info = target / f"riftco-{meta['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: riftco\nVersion: {meta['version']}\n", encoding="utf-8"
    )
    lines = []
    for group, entries in meta.get("entry-points", {}).items():
        lines.append(f"[{group}]")
        lines += [f"{k} = {v}" for k, v in entries.items()]
        lines.append("")
    for name, target_ in meta.get("scripts", {}).items():
        lines = ["[console_scripts]", f"{name} = {target_}", "", *lines]
    (info / "entry_points.txt").write_text("\n".join(lines), encoding="utf-8")
    return target


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    spec = importlib.util.find_spec("riftco")
    if spec is not None:
        where = spec.submodule_search_locations or [spec.origin]
        print(f"gpu_shim: riftco is already importable from {list(where)}", file=sys.stderr)
        return 1
    print(build(Path(os.path.abspath(sys.argv[1]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
