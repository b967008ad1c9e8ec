"""Damaged checkpoints are ``[checkpoint]`` errors naming the file, never NaN weights.

Each test writes a real checkpoint, damages one thing the way a disk, a copy or an editor
would (a flipped bit, a truncated file, a missing file, broken or incomplete JSON, a tensor
of the wrong dtype or shape) and checks the error: the file, what is wrong, and that
safetensors never parsed unverified bytes.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from riftco.train import checkpoint as ckpt_mod
from riftco.train.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from riftco.train.cli import sample_main
from riftco.train.loop import Trainer
from riftco.train.restore import model_and_tokenizer
from train_helpers import head_corpus, tiny_trainer

TINY = dict(layers=1, heads=2, width=16)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return head_corpus(tmp_path_factory)


def _trainer(corpus, out, steps=4, **cfg):
    train = dict(steps=steps, batch_size=4, lr=1e-2, warmup=1, eval_every=2, eval_iters=1)
    return tiny_trainer(corpus, out, None, dict(context=8, **TINY), **{**train, **cfg})


@pytest.fixture
def run(corpus, tmp_path):
    """A finished 4-step run; returns its directory and checkpoint folder."""
    out = tmp_path / "run"
    result = _trainer(corpus, out).run(progress=False)
    return out, result.checkpoint


@pytest.fixture
def no_parse(monkeypatch):
    """Bytes added to the returned list fail the test if safetensors is asked to parse them."""
    damaged: list[bytes] = []
    real = ckpt_mod.load_tensors

    def guarded(data):
        if bytes(data) in damaged:
            raise AssertionError("safetensors parsed bytes that were not verified")
        return real(data)

    monkeypatch.setattr(ckpt_mod, "load_tensors", guarded)
    return damaged


def _rehash(folder, mutate):
    """Apply ``mutate`` to state.json and give it a valid self-hash (a deliberate edit)."""
    state = json.loads((folder / "state.json").read_text())
    mutate(state)
    state["state_sha256"] = ckpt_mod._state_hash(state)
    (folder / "state.json").write_text(json.dumps(state))


def _payload_offset(path):
    """Byte offset of the first tensor's data (after the 8-byte length and the header)."""
    return 8 + int.from_bytes(path.read_bytes()[:8], "little")


def test_hashes_are_sha256_of_the_bytes_on_disk(run):
    _, folder = run
    state = json.loads((folder / "state.json").read_text())
    assert state["format"] == 2
    for name in ("model.safetensors", "optimizer.safetensors"):
        data = (folder / name).read_bytes()
        assert state["files"][name] == {
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
    assert load_checkpoint(folder).verified


@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.safetensors"])
def test_flipped_bit_is_caught_before_parsing(run, name, no_parse):
    out, folder = run
    path = folder / name
    data = bytearray(path.read_bytes())
    # The top exponent bit of a float32 in the payload: today this loads as a huge or NaN
    # weight and trains on with exit 0.
    data[_payload_offset(path) + 3] ^= 0x40
    path.write_bytes(bytes(data))
    no_parse.append(bytes(data))
    with pytest.raises(CheckpointError, match=rf"\[checkpoint\] .*{name}' is corrupt: sha256"):
        load_checkpoint(out)


def test_truncated_file(run, no_parse):
    out, folder = run
    path = folder / "model.safetensors"
    full = path.stat().st_size
    path.write_bytes(path.read_bytes()[: full // 2])
    no_parse.append(path.read_bytes())
    with pytest.raises(
        CheckpointError,
        match=rf"model.safetensors' is truncated: {full // 2:,} bytes, state.json recorded "
        rf"{full:,}",
    ):
        load_checkpoint(out)


def test_missing_files(run, capsys):
    out, folder = run
    (folder / "optimizer.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"optimizer.safetensors' is missing"):
        load_checkpoint(out)
    # Sampling needs only the weights.
    assert load_checkpoint(out, optimizer=False).optimizer is None
    assert sample_main(["--checkpoint", str(out), "--tokens", "5", "--prompt", "A"]) == 0
    assert capsys.readouterr().out.startswith("A")
    (folder / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"model.safetensors' is missing"):
        load_checkpoint(out, optimizer=False)
    assert sample_main(["--checkpoint", str(out)]) == 2
    assert "model.safetensors' is missing" in capsys.readouterr().err


def test_bad_json_and_edited_json(run):
    out, folder = run
    state = folder / "state.json"
    original = state.read_bytes()
    state.write_bytes(original[: len(original) // 3])
    with pytest.raises(
        CheckpointError, match=r"state.json' is corrupt or truncated: not valid JSON"
    ):
        load_checkpoint(out)
    state.write_bytes(b"\xff\xfe" + original)
    with pytest.raises(CheckpointError, match=r"state.json' is corrupt: not UTF-8"):
        load_checkpoint(out)
    edited = json.loads(original)
    edited["train"]["lr"] = 0.5  # valid JSON, but not what was written
    state.write_text(json.dumps(edited))
    with pytest.raises(CheckpointError, match=r"does not match the sha256 recorded"):
        load_checkpoint(out)
    state.write_text("[1, 2]")
    with pytest.raises(CheckpointError, match=r"should hold a JSON object; it holds a list"):
        load_checkpoint(out)
    state.write_text(json.dumps({**json.loads(original), "format": 99}))
    with pytest.raises(CheckpointError, match=r"has format 99; this riftco reads 1, 2"):
        load_checkpoint(out)


def test_missing_keys(run, capsys):
    out, folder = run
    _rehash(folder, lambda s: s.pop("step"))
    with pytest.raises(CheckpointError, match=r"lacks the key\(s\) \['step'\]"):
        load_checkpoint(out)
    _rehash(folder, lambda s: s.update(step=3))
    _rehash(folder, lambda s: s.pop("model"))
    ckpt = load_checkpoint(out)  # the generic reader does not know what a trainer stores
    with pytest.raises(CheckpointError, match=r"state.json' lacks the key 'model'"):
        model_and_tokenizer(ckpt, "cpu")
    with pytest.raises(CheckpointError, match=r"lacks the key 'model'"):
        Trainer.resume(out, device="cpu")
    assert sample_main(["--checkpoint", str(out)]) == 2
    assert "lacks the key 'model'" in capsys.readouterr().err


def test_bad_entries_in_state(run):
    out, folder = run
    _rehash(folder, lambda s: s["model"].update(heads=3))  # 16 is not divisible by 3
    with pytest.raises(CheckpointError, match=r"'model' is not a valid model config"):
        Trainer.resume(out, device="cpu")
    _rehash(folder, lambda s: s["model"].update(heads=2, colour="red"))
    with pytest.raises(CheckpointError, match=r"'model' is not a valid model config.*colour"):
        Trainer.resume(out, device="cpu")
    _rehash(folder, lambda s: (s["model"].pop("colour"), s["train"].update(lr=float("nan"))))
    with pytest.raises(CheckpointError, match=r"lr must be a finite number > 0; got nan"):
        Trainer.resume(out, device="cpu")
    _rehash(folder, lambda s: (s["train"].update(lr=0.01), s.update(dtype="float16")))
    with pytest.raises(CheckpointError, match=r"dtype should be one of .*got 'float16'"):
        Trainer.resume(out, device="cpu")
    _rehash(folder, lambda s: (s.update(dtype="float32"), s["tokenizer"].update(chars="ab")))
    with pytest.raises(CheckpointError, match=r"tokenizer has 2 characters but the model's vocab"):
        Trainer.resume(out, device="cpu")


def test_checkpoint_from_before_the_recompute_rename_loads(run):
    """state.json written when GPTConfig's ``recompute`` was called ``checkpointing``."""
    out, folder = run

    def legacy(state):
        state["model"]["checkpointing"] = state["model"].pop("recompute")
        state["model"]["checkpointing"] = "block"

    _rehash(folder, legacy)
    trainer = Trainer.resume(out, device="cpu")
    assert trainer.model.config.recompute == "block"
    _rehash(folder, lambda s: s["model"].update(checkpointing="sometimes"))
    with pytest.raises(CheckpointError, match=r"recompute must be one of"):
        Trainer.resume(out, device="cpu")


def _resave(folder, weights=None, optimizer=None):
    """Rewrite the checkpoint with other tensors, validly hashed (a foreign writer)."""
    ckpt = load_checkpoint(folder)
    meta = dict(ckpt.meta)
    meta.pop("format")
    return save_checkpoint(
        folder.parent,
        weights if weights is not None else ckpt.weights,
        optimizer if optimizer is not None else ckpt.optimizer,
        meta,
    )


def test_wrong_shape_and_dtype_of_weights(run):
    out, folder = run
    weights = load_checkpoint(folder).weights
    name = "head.weight" if "head.weight" in weights else sorted(weights)[-1]
    wrong = dict(weights)
    wrong[name] = weights[name].astype(np.float64)
    folder = _resave(folder, weights=wrong)
    with pytest.raises(
        CheckpointError, match=rf"model.safetensors' does not fit.*{name}.*float64.*float32"
    ):
        Trainer.resume(out, device="cpu")
    wrong[name] = weights[name][:, :-1].copy()
    folder = _resave(folder, weights=wrong)
    with pytest.raises(CheckpointError, match=rf"does not fit.*{name}.*shape"):
        model_and_tokenizer(load_checkpoint(out), "cpu")
    wrong[name] = weights[name].copy()
    wrong[name][0, 0] = np.nan
    _resave(folder, weights=wrong)
    with pytest.raises(CheckpointError, match=rf"{name}' holds 1 non-finite value"):
        model_and_tokenizer(load_checkpoint(out), "cpu")


def test_wrong_dtype_of_optimizer_moments(run):
    out, folder = run
    opt = load_checkpoint(folder).optimizer
    entry = next(i for i, st in enumerate(opt[0]["state"]) if st is not None)
    opt[0]["state"][entry]["m"] = opt[0]["state"][entry]["m"].astype(np.float64)
    _resave(folder, optimizer=opt)
    with pytest.raises(CheckpointError, match=rf"optimizer 0\[{entry}\].m is float64"):
        Trainer.resume(out, device="cpu")


def test_damaged_latest(run):
    out, folder = run
    (out / "LATEST").write_text("../../etc\n")
    with pytest.raises(CheckpointError, match=r"LATEST' is damaged"):
        load_checkpoint(out)
    (out / "LATEST").write_text("ckpt-00000099-abcdef\n")
    with pytest.raises(CheckpointError, match=r"names 'ckpt-00000099-abcdef', which is missing"):
        load_checkpoint(out)


def _downgrade(folder):
    """Turn a checkpoint into what format 1 wrote: no hashes."""
    state = json.loads((folder / "state.json").read_text())
    for key in ("files", "state_sha256"):
        state.pop(key)
    state["format"] = 1
    (folder / "state.json").write_text(json.dumps(state))


def test_format_1_loads_unverified_and_resumes_into_format_2(corpus, run, capsys):
    out, folder = run
    before = load_checkpoint(folder)
    _downgrade(folder)
    old = load_checkpoint(out)
    assert not old.verified and old.step == before.step
    assert all(np.array_equal(old.weights[k], before.weights[k]) for k in before.weights)
    assert sample_main(["--checkpoint", str(out), "--tokens", "3"]) == 0
    assert "no content hashes" in capsys.readouterr().err
    trainer = Trainer.resume(out, device="cpu", steps=6)
    result = trainer.run(progress=False)
    assert result.step == 6 and load_checkpoint(out).verified  # new saves carry hashes


def test_format_1_damage_is_still_a_checkpoint_error(run):
    out, folder = run
    _downgrade(folder)
    path = folder / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[2] ^= 0x10  # the header length: no hash to catch it, the parser must
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"model.safetensors' is not a readable safetensors"):
        load_checkpoint(out)
    path.write_bytes(bytes(data[:4]))
    with pytest.raises(CheckpointError, match=r"is not a readable safetensors"):
        load_checkpoint(out)
