"""The installed layout as a tree of links, built from pyproject.toml's ``package-dir``.

The folders are named for what they hold (``core/``, ``backends/``, ``shaders/``,
``conformance/``) while the code imports ``riftco``, ``riftco.backends``, ... Tools that
read source without running setuptools' editable finder (mypy, pyright/Pylance, the
device machine's import shim) need the import names on disk: this builds them once, from
the one mapping pyproject.toml declares, never from a hand-kept list.

    python .ci/links.py build/typecheck      # `make install` and `make typecheck` run it

``derived_packages()`` is the ``packages`` list the folders imply (every folder with an
``__init__.py`` under a mapped root); tests/core/test_package_layout.py holds pyproject's list
to it, so a new subpackage costs one folder and one line the test names.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def project() -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def package_dir() -> dict[str, str]:
    return dict(project()["tool"]["setuptools"]["package-dir"])


def link_tree(target: Path) -> Path:
    """``target/riftco``: links to the root package's files plus one link per mapped
    subpackage folder (``riftco/backends -> backends/``), replacing what was there."""
    mapping = package_dir()
    pkg = target / "riftco"
    if pkg.is_symlink() or pkg.is_file():
        pkg.unlink()
    elif pkg.exists():
        shutil.rmtree(pkg)
    pkg.mkdir(parents=True)
    for entry in sorted((ROOT / mapping["riftco"]).iterdir()):
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry)
    for name, folder in mapping.items():
        if name == "riftco":
            continue
        link = pkg.joinpath(*name.split(".")[1:])
        if not link.exists():  # a mapping nested in another mapped folder is already there
            link.symlink_to(ROOT / folder)
    return pkg


def derived_packages() -> list[str]:
    """Every package the mapped folders hold, by import name: each folder with an
    ``__init__.py``, and each data-only folder ``package-data`` names (shader stubs)."""
    setuptools = project()["tool"]["setuptools"]
    found = {
        name
        for name in setuptools.get("package-data", {})
        if _folder_of(name, package_dir()) is not None
    }
    for name, folder in package_dir().items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            parts = init.parent.relative_to(base).parts
            if "__pycache__" in parts or any(p.startswith(".") for p in parts):
                continue
            found.add(".".join([name, *parts]))
    return sorted(found)


def _folder_of(name: str, mapping: dict[str, str]) -> Path | None:
    """The folder of package ``name`` under the longest mapped prefix, if it exists."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        prefix = ".".join(parts[:i])
        if prefix in mapping:
            folder = (
                ROOT / mapping[prefix] / Path(*parts[i:]) if parts[i:] else ROOT / mapping[prefix]
            )
            return folder if folder.is_dir() else None
    return None


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    print(link_tree(Path(argv[0]).resolve()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
