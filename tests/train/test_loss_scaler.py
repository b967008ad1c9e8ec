"""The loss scale's rule on its own (PyTorch GradScaler's): an overflow halves it and resets
the count of good steps; ``interval`` good steps in a row double it; its state survives a
checkpoint's JSON and a malformed one is refused. The trainer's use of it (skipped updates,
the log) is in test_mixed_precision_scaling.py."""

from __future__ import annotations

import json

import pytest
from riftco.errors import DomainError
from riftco.train.loop import TrainConfig
from riftco.train.precision import INITIAL_SCALE, LossScaler


def test_starts_at_two_to_the_sixteen():
    assert LossScaler(5).scale == 65536.0 == INITIAL_SCALE


def test_overflow_halves_the_scale_and_resets_the_count():
    s = LossScaler(3)
    assert s.update(1, True) is None and s.update(2, True) is None
    line = s.update(3, False)
    assert s.scale == 32768.0 and s.good_steps == 0 and s.skipped == 1
    assert line is not None and "step 3" in line and "65536 -> 32768" in line and "skipped" in line
    # the two good steps before the overflow do not count towards growth
    assert s.update(4, True) is None and s.update(5, True) is None and s.scale == 32768.0
    assert s.update(6, True) is not None and s.scale == 65536.0


def test_growth_after_interval_good_steps():
    s = LossScaler(4)
    lines = [s.update(step, True) for step in range(1, 13)]
    assert [i + 1 for i, line in enumerate(lines) if line] == [4, 8, 12]
    assert s.scale == 65536.0 * 8
    assert "step 8: loss scale 131072 -> 262144 after 4 steps without overflow" in lines[7]
    assert s.events == [
        (4, 65536.0, 131072.0, False),
        (8, 131072.0, 262144.0, False),
        (12, 262144.0, 524288.0, False),
    ]


def test_state_round_trips_through_json():
    s = LossScaler(2)
    for step, ok in enumerate([True, False, True, True, True], start=1):
        s.update(step, ok)
    back = LossScaler(2)
    back.load_state_dict(json.loads(json.dumps(s.state_dict())))
    assert back == s
    # the next decision is the same: one more good step doubles both
    assert (back.update(6, True), back.scale) == (s.update(6, True), s.scale)


@pytest.mark.parametrize(
    "edit, words",
    [
        ({"scale": 3.0}, "power of two"),
        ({"scale": float("inf")}, "power of two"),
        ({"scale": "65536"}, "number"),
        ({"good_steps": -1}, "good_steps"),
        ({"skipped": 1.5}, "skipped"),
    ],
)
def test_malformed_state_is_refused(edit, words):
    state = {**LossScaler(2).state_dict(), **edit}
    with pytest.raises(ValueError, match=words):
        LossScaler(2).load_state_dict(state)


@pytest.mark.parametrize("bad", [0, -3, 2.5])
def test_interval_must_be_a_positive_integer(bad):
    with pytest.raises(DomainError, match="loss_scale_interval"):
        TrainConfig(loss_scale_interval=bad).validate()


def test_unknown_precision_is_refused_naming_the_choices():
    with pytest.raises(DomainError, match="fp32, bf16-mixed, fp16-mixed.*'fp8'"):
        TrainConfig(precision="fp8").validate()
