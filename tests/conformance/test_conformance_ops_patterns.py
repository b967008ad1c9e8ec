"""``riftco conformance --ops``: a pattern that matches nothing is an error naming the closest
ops (issue 31: ``--ops softmx`` said "OK: 5 cases" and exited 0, the protocol cases alone)."""

from __future__ import annotations

import pytest
from riftco.conformance import cli


def test_a_typo_is_an_error_naming_the_closest_ops(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["cpu", "--ops", "softmx", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "'softmx' matches no op or case id" in err
    assert "closest: softmax" in err and "OK" not in err


def test_one_bad_pattern_among_good_ones_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["cpu", "--ops", "exp,matmull", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "'matmull'" in err and "closest: matmul" in err and "'exp'" not in err


def test_patterns_that_match_still_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["cpu", "--ops", "exp,capture/exp*", "--quiet", "--max-examples", "2"]) == 0
    out = capsys.readouterr().out
    assert "OK:" in out and "cases" in out
