"""``riftco train --precision``: what the run prints, resuming keeps the saved precision,
and a backend without the compute dtype is refused before the first step."""

from __future__ import annotations

import types

import numpy as np
import pytest
import riftco
from riftco.errors import DTypeError
from riftco.train.checkpoint import load_checkpoint
from riftco.train.cli import train_main
from riftco.train.precision import check_device, precision
from train_helpers import head_corpus


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    return head_corpus(tmp_path_factory).path


def _argv(out, data, *extra):
    model = ["--context", "8", "--layers", "1", "--heads", "2", "--width", "16"]
    run = ["--steps", "4", "--batch-size", "4", "--eval-every", "2", "--eval-iters", "1"]
    quiet = ["--sample-tokens", "0", "--no-progress"]
    return ["--backend", "cpu", "--data", str(data), "--out", str(out), *model, *run, *quiet,
            *extra]  # fmt: skip


def test_fp16_run_says_how_it_computes_and_what_the_scale_did(tmp_path, text_file, capsys):
    argv = _argv(tmp_path / "run", text_file, "--precision", "fp16-mixed")
    assert train_main([*argv, "--loss-scale-interval", "3"]) == 0
    out = capsys.readouterr().out
    assert (
        "float32 on cpu:0; fp16-mixed: float32 masters and AdamW state, float16 compute, loss "
        "scale 65536 (doubled after 3 steps without overflow)"
    ) in out
    summary = next(line for line in out.splitlines() if line.startswith("summary:"))
    assert "steps skipped on overflow, final loss scale" in summary
    saved = load_checkpoint(tmp_path / "run")
    assert saved.meta["train"]["precision"] == "fp16-mixed"
    assert {w.dtype for w in saved.weights.values()} == {np.dtype(np.float32)}  # masters


def test_resume_keeps_the_saved_precision(tmp_path, text_file, capsys):
    out = tmp_path / "run"
    assert train_main(_argv(out, text_file, "--precision", "fp16-mixed")) == 0
    capsys.readouterr()
    resume = ["--resume", str(out), "--backend", "cpu", "--no-progress", "--sample-tokens", "0"]
    assert train_main([*resume, "--precision", "fp32"]) == 2
    assert "--precision fp32 (the run has fp16-mixed)" in capsys.readouterr().err
    assert train_main([*resume, "--steps", "6"]) == 0
    assert "fp16-mixed: float32 masters" in capsys.readouterr().out


def test_fp32_stays_the_default(tmp_path, text_file, capsys):
    assert train_main(_argv(tmp_path / "run", text_file)) == 0
    out = capsys.readouterr().out
    assert "mixed" not in out and "loss scale" not in out
    assert load_checkpoint(tmp_path / "run").meta["train"]["precision"] == "fp32"


def test_a_backend_without_the_compute_dtype_is_refused():
    backend = types.SimpleNamespace(name="plain", dtypes=frozenset({np.dtype(np.float32)}))
    device = types.SimpleNamespace(backend=backend)
    with pytest.raises(DTypeError) as info:
        check_device(precision("fp16-mixed"), device, np.dtype(np.float32))
    message = str(info.value)
    assert message.startswith("[train] precision fp16-mixed computes in float16")
    assert "backend 'plain' does not declare (it declares float32)" in message
    check_device(precision("fp32"), device, np.dtype(np.float32))  # fp32 needs nothing new


def test_mixed_precision_needs_float32_masters():
    device = riftco.device("cpu")
    with pytest.raises(DTypeError, match="keeps float32 master weights.*float64"):
        check_device(precision("fp16-mixed"), device, np.dtype(np.float64))


def test_a_run_saved_before_precision_existed_resumes_as_fp32(tmp_path, text_file, capsys):
    """A checkpoint written before ``--precision`` has no ``precision``: it resumes as fp32
    (the config's default), so repeating ``--precision fp32`` changes nothing and is
    accepted, while asking for bf16-mixed would change the run and is refused."""
    import json

    from riftco.train import checkpoint as ck

    out = tmp_path / "run"
    assert train_main(_argv(out, text_file)) == 0
    capsys.readouterr()
    state_path = ck.resolve(str(out)) / ck.STATE
    state = json.loads(state_path.read_text())
    del state["train"]["precision"]
    state[ck.SELF_HASH] = ck._state_hash(state)
    state_path.write_text(json.dumps(state))
    resume = ["--resume", str(out), "--backend", "cpu", "--no-progress", "--sample-tokens", "0"]
    assert train_main([*resume, "--precision", "bf16-mixed"]) == 2
    assert "--precision bf16-mixed (the run has fp32)" in capsys.readouterr().err
    assert train_main([*resume, "--precision", "fp32", "--steps", "6"]) == 0
