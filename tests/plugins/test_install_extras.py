"""The default install brings metalcompute on a Mac that has a wheel for it, and only there.

`make train` / `make test` install ``-e ".[test,plot]"``; ``pip install riftco[...]``
installs the base dependencies plus the extras named. The requirement markers in
pyproject.toml are evaluated with ``packaging.markers`` for target environments (not this
machine), and every environment that gets metalcompute must find a wheel among the files
metalcompute's minimum pinned release publishes (recorded below), so the default install
never compiles Swift. docs/METAL.md ("Installing") explains the environments left out.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

packaging = pytest.importorskip("packaging", reason="the marker check needs 'packaging'")
from packaging.requirements import Requirement  # noqa: E402
from packaging.tags import cpython_tags, mac_platforms  # noqa: E402
from packaging.utils import canonicalize_name, parse_wheel_filename  # noqa: E402
from packaging.version import Version  # noqa: E402

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli", reason="Python 3.10 reads pyproject.toml with tomli")

ROOT = Path(__file__).resolve().parents[2]

#: Files of metalcompute 0.2.9 on PyPI (its JSON metadata, read 2026-11-30): an sdist and
#: these wheels, all macOS 14 arm64. 0.2.5 (2023) was the last release with x86_64 wheels.
METALCOMPUTE_0_2_9_WHEELS = (
    "metalcompute-0.2.9-cp39-cp39-macosx_14_0_arm64.whl",
    "metalcompute-0.2.9-cp310-cp310-macosx_14_0_arm64.whl",
    "metalcompute-0.2.9-cp311-cp311-macosx_14_0_arm64.whl",
    "metalcompute-0.2.9-cp312-cp312-macosx_14_0_arm64.whl",
    "metalcompute-0.2.9-cp313-cp313-macosx_14_0_arm64.whl",
    "metalcompute-0.2.9-pp39-pypy39_pp73-macosx_14_0_arm64.whl",
    "metalcompute-0.2.9-pp310-pypy310_pp73-macosx_14_0_arm64.whl",
)

#: Darwin kernel release -> macOS version (platform_release is the kernel's).
DARWIN = {"22.6.0": (13, 6), "23.6.0": (14, 6), "24.6.0": (15, 6), "25.1.0": (26, 1)}


def _project() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def _make_extras() -> list[str]:
    """The extras `make install` (hence `make train` and `make test`) installs."""
    text = (ROOT / "Makefile").read_text()
    found = re.findall(r'pip install [^\n]*-e "\.\[([a-z0-9_,-]+)\]"', text)
    assert len(found) == 1, f"expected one editable install line in the Makefile: {found}"
    return found[0].split(",")


def _env(platform: str, machine: str, release: str, python: str) -> dict[str, str]:
    return {
        "sys_platform": platform,
        "platform_system": {"darwin": "Darwin", "linux": "Linux", "win32": "Windows"}[platform],
        "os_name": "nt" if platform == "win32" else "posix",
        "platform_machine": machine,
        "platform_release": release,
        "platform_version": "",
        "platform_python_implementation": "CPython",
        "implementation_name": "cpython",
        "implementation_version": python + ".0",
        "python_version": python,
        "python_full_version": python + ".0",
    }


def _installed(env: dict[str, str], extras: list[str]) -> dict[str, Requirement]:
    """name -> requirement of everything pip would install for riftco[extras] in ``env``."""
    project = _project()
    reqs = [(Requirement(r), "") for r in project["dependencies"]]
    for extra in extras:
        reqs += [(Requirement(r), extra) for r in project["optional-dependencies"][extra]]
    out = {}
    for req, extra in reqs:
        if req.marker is None or req.marker.evaluate({**env, "extra": extra}):
            out[canonicalize_name(req.name)] = req
    return out


def _wheel_fits(env: dict[str, str], filenames: tuple[str, ...]) -> bool:
    major, minor = (int(p) for p in env["python_version"].split("."))
    macos = DARWIN[env["platform_release"]]
    supported = set(
        cpython_tags((major, minor), platforms=list(mac_platforms(macos, env["platform_machine"])))
    )
    # a wheel fits when the target accepts any of its tags
    return any(set(parse_wheel_filename(name)[3]) & supported for name in filenames)


MAC_WITH_WHEELS = [
    ("darwin", "arm64", release, python)
    for release in ("23.6.0", "24.6.0", "25.1.0")
    for python in ("3.10", "3.11", "3.12", "3.13")
]


@pytest.mark.parametrize("target", MAC_WITH_WHEELS, ids="-".join)
@pytest.mark.parametrize("extras", [None, ["test", "plot"], []], ids=["make", "test+plot", "bare"])
def test_default_install_on_apple_silicon_brings_metalcompute(target, extras):
    env = _env(*target)
    wanted = _make_extras() if extras is None else extras
    installed = _installed(env, wanted)
    assert "metalcompute" in installed, (target, wanted, sorted(installed))
    spec = installed["metalcompute"].specifier
    assert Version("0.2.9") in spec and Version("0.2.5") not in spec  # the release checked
    assert _wheel_fits(env, METALCOMPUTE_0_2_9_WHEELS), f"no 0.2.9 wheel fits {target}"


@pytest.mark.parametrize(
    "target, why",
    [
        (("linux", "x86_64", "6.8.0-1015-aws", "3.12"), "not a Mac"),
        (("linux", "aarch64", "6.1.0", "3.11"), "not a Mac"),
        (("win32", "AMD64", "10", "3.12"), "not a Mac"),
        (("darwin", "x86_64", "24.6.0", "3.12"), "Intel Mac (or Python under Rosetta)"),
        (("darwin", "arm64", "22.6.0", "3.12"), "macOS 13: only an sdist of 0.2.9 fits"),
        (("darwin", "arm64", "24.6.0", "3.14"), "no cp314 wheel"),
    ],
)
def test_default_install_leaves_metalcompute_out_where_no_wheel_fits(target, why):
    env = _env(*target)
    assert "metalcompute" not in _installed(env, _make_extras()), why
    if target[0] == "darwin":  # the explicit extra still asks for it (builds from source)
        assert "metalcompute" in _installed(env, ["metal"])
        assert not _wheel_fits(env, METALCOMPUTE_0_2_9_WHEELS), why


def test_wheel_check_can_fail():
    """The wheel matcher rejects a target no listed wheel serves (so the test above bites)."""
    env = _env("darwin", "arm64", "23.6.0", "3.12")  # macOS 14.6
    assert _wheel_fits(env, METALCOMPUTE_0_2_9_WHEELS)
    assert not _wheel_fits(env, ("metalcompute-0.2.9-cp312-cp312-macosx_15_0_arm64.whl",))
    assert not _wheel_fits(env, ("metalcompute-0.2.9-cp312-cp312-macosx_14_0_x86_64.whl",))
    assert not _wheel_fits(env, ("metalcompute-0.2.9-cp311-cp311-macosx_14_0_arm64.whl",))


@pytest.mark.parametrize(
    "target",
    [
        *MAC_WITH_WHEELS,
        ("darwin", "arm64", "24.6.0", "3.14"),
        ("darwin", "x86_64", "24.6.0", "3.12"),
    ],
    ids="-".join,
)
def test_default_install_on_every_mac_brings_the_own_metal_runtime(target):
    """riftco's own Metal runtime needs only cffi: every Mac and every Python gets it from a
    bare install, where metalcompute's wheels stop (Python 3.14, Intel)."""
    installed = _installed(_env(*target), [])
    assert "cffi" in installed, (target, sorted(installed))
    assert not installed["cffi"].marker or "python_version" not in str(installed["cffi"].marker)


def test_no_cffi_by_default_off_a_mac():
    """Elsewhere cffi comes with the native extra (or the test extra), not the bare install."""
    assert "cffi" not in _installed(_env("linux", "x86_64", "6.8.0", "3.12"), [])
