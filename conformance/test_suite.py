"""Collected by ``pytest --pyargs riftco.conformance --backend=NAME``: one test per case.

The project's own ``pytest`` run never collects this file (testpaths = tests); without
``--backend`` every test here skips with the reason.
"""

from __future__ import annotations

from typing import Any

from riftco.conformance.pytest_plugin import run_case


def test_conformance(riftco_conformance_case: Any) -> None:
    run_case(riftco_conformance_case)
