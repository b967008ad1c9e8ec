"""The folders are named for what they hold and imported as ``riftco.*`` through
pyproject.toml's ``package-dir``; this holds the rest of the tooling to that one mapping:
the ``packages`` list is the one the folders imply, and the link tree that mypy and
editors read (.ci/links.py, pyrightconfig.json) resolves every package to its folder."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _links() -> ModuleType:
    sys.path.insert(0, str(ROOT / ".ci"))
    import links

    return links


def test_packages_list_is_the_one_the_folders_imply() -> None:
    links = _links()
    declared = sorted(links.project()["tool"]["setuptools"]["packages"])
    derived = links.derived_packages()
    missing = sorted(set(derived) - set(declared))
    stale = sorted(set(declared) - set(derived))
    assert not missing and not stale, (
        f"pyproject.toml [tool.setuptools] packages: add {missing}, remove {stale} "
        "(a folder with an __init__.py under a package-dir root is a package)"
    )


def test_link_tree_resolves_every_package_to_its_folder(tmp_path: Path) -> None:
    links = _links()
    pkg = links.link_tree(tmp_path)
    for name in links.derived_packages():
        where = pkg.joinpath(*name.split(".")[1:])
        assert where.is_dir() and any(where.iterdir()), f"{name}: nothing at {where}"
    mapping = links.package_dir()
    for name, folder in mapping.items():
        if name == "riftco":  # a folder of links to core/'s entries
            continue
        resolved = pkg.joinpath(*name.split(".")[1:]).resolve()
        assert resolved == (ROOT / folder).resolve(), (name, resolved)
    links.link_tree(tmp_path)  # rebuilding replaces the old tree
    assert (pkg / "__init__.py").resolve() == (ROOT / mapping["riftco"] / "__init__.py")


def test_editors_and_mypy_read_the_same_tree() -> None:
    pyright = json.loads((ROOT / "pyrightconfig.json").read_text())
    makefile = (ROOT / "Makefile").read_text()
    assert pyright["extraPaths"] == ["build/typecheck"]
    assert 'mypy_path = "build/typecheck"' in (ROOT / "pyproject.toml").read_text()
    assert makefile.count(".ci/links.py build/typecheck") == 2  # make install and typecheck


def test_every_package_data_glob_matches_a_file() -> None:
    """A glob that matches nothing promises files the wheel does not have."""
    links = _links()
    setuptools = links.project()["tool"]["setuptools"]
    empty = []
    for name, globs in setuptools["package-data"].items():
        folder = links._folder_of(name, links.package_dir())
        assert folder is not None, f"package-data names {name}, which has no folder"
        empty += [f"{name}: {g}" for g in globs if not any(p.is_file() for p in folder.glob(g))]
    assert not empty, f"package-data globs that match no file: {empty}"
