"""The conformance suite as a pytest plugin: ``pytest --pyargs riftco.conformance --backend=X``.

Registered for every pytest run through the ``pytest11`` entry point, so it must stay
inert: it only adds options, and only the suite's own test module
(``riftco/conformance/test_suite.py``) asks for the ``riftco_conformance_case`` fixture it
parametrises. Without ``--backend`` those tests skip, saying why.
"""

from __future__ import annotations

from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("riftco-conformance", "riftco backend conformance suite")
    group.addoption(
        "--backend",
        default=None,
        metavar="NAME[:DEVICE]",
        help="run the riftco conformance suite on this backend",
    )
    group.addoption(
        "--conformance-max-examples",
        type=int,
        default=None,
        metavar="N",
        help="hypothesis-drawn examples per case (default: the CLI's)",
    )
    group.addoption(
        "--conformance-seed",
        type=int,
        default=None,
        help="draw examples from this seed (default: derandomised)",
    )
    group.addoption(
        "--conformance-ops",
        default="",
        metavar="PATTERNS",
        help="comma-separated op names or case-id globs",
    )
    group.addoption(
        "--conformance-expectations",
        default=None,
        metavar="PATH",
        help="expectations file (default: the backend's own)",
    )
    group.addoption(
        "--conformance-strict", action="store_true", help="an xfail case that passes is a failure"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "riftco_conformance_case" not in metafunc.fixturenames:
        return
    config = metafunc.config
    spec = config.getoption("--backend")
    if not spec:
        metafunc.parametrize("riftco_conformance_case", [None], ids=["no-backend"])
        return
    from riftco.conformance.expectations import for_backend
    from riftco.conformance.runner import DEFAULT_MAX_EXAMPLES, RunSettings
    from riftco.conformance.suite import plan, resolve

    n = config.getoption("--conformance-max-examples")
    run = RunSettings(
        DEFAULT_MAX_EXAMPLES if n is None else n, config.getoption("--conformance-seed")
    )
    patterns = [p.strip() for p in config.getoption("--conformance-ops").split(",") if p.strip()]
    params, ids = [], []
    for target in resolve(spec):
        target.ops = patterns
        expectations = for_backend(target.entry.cls, config.getoption("--conformance-expectations"))
        for planned in plan(target, run):
            params.append((planned, expectations, config.getoption("--conformance-strict")))
            ids.append(f"{target.label}/{planned.case_id}")
    metafunc.parametrize("riftco_conformance_case", params, ids=ids)


def run_case(param: Any) -> None:
    """Body of the suite's test: run one planned case, map its outcome onto pytest's."""
    if param is None:
        pytest.skip("pass --backend=NAME[:DEVICE] to run the riftco conformance suite")
    from riftco.conformance.report import explain, row
    from riftco.conformance.suite import apply_expectation

    planned, expectations, strict = param
    exp = expectations.lookup(planned.case_id)
    if exp is not None and exp.status == "skip":
        pytest.skip(f"expectations file: {exp.reason}")
    if exp is not None:
        exp.matched -= 1  # apply_expectation counts it again
    results = [apply_expectation(r, expectations) for r in planned.run()]
    failed = [r for r in results if r.failed(strict)]
    if failed:
        pytest.fail("\n".join(f"{row(r)}\n{explain(r)}" for r in failed), pytrace=False)
    if any(r.status == "xfail" for r in results):
        pytest.xfail("; ".join(r.reason for r in results if r.status == "xfail"))
    skipped = [r for r in results if r.status == "skip"]
    if skipped and len(skipped) == len(results):
        pytest.skip("; ".join(r.reason for r in skipped))
