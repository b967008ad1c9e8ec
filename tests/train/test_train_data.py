"""Tokenizer, corpus loading, the learning-rate schedule and atomic checkpoints.

None of these need autograd: they are the data plumbing around the model.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from riftco.train import checkpoint as ckpt_mod
from riftco.train.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from riftco.train.data import CharDataset, load_text, min_chars
from riftco.train.schedule import lr_at
from riftco.train.tokenizer import CharTokenizer, DataError


def test_tokenizer_round_trip_and_order():
    text = "Ünïcödé, spaces\nand 日本語 too!"
    tok = CharTokenizer.from_text(text)
    ids = tok.encode(text)
    assert ids.dtype == np.int32
    assert tok.decode(ids) == text
    assert tok.chars == sorted(set(text))  # ids follow code-point order
    assert [ord(tok.chars[i]) for i in ids] == [ord(c) for c in text]
    again = CharTokenizer.from_dict(json.loads(json.dumps(tok.to_dict())))
    assert again.chars == tok.chars
    shuffled = CharTokenizer(["b", "a", "c"])  # a stored vocabulary need not be sorted
    assert shuffled.encode("abcab").tolist() == [1, 0, 2, 1, 0]
    assert shuffled.decode([1, 0, 2]) == "abc"


def test_tokenizer_rejects_unknown_character():
    tok = CharTokenizer.from_text("abc")
    with pytest.raises(DataError, match=r"'z' \(U\+007A\) is not in the vocabulary of 3"):
        tok.encode("abz")
    with pytest.raises(DataError, match="out of range"):
        tok.decode([0, 3])


def test_embedded_corpus_loads():
    text, source = load_text(None)
    assert source.startswith("embedded")
    assert len(text) > 1_000_000
    assert text.startswith("First Citizen:")
    data = CharDataset.from_text(text, 64, source)
    assert data.tokenizer.vocab_size == 65
    assert len(data.train) == int(0.9 * len(text))
    assert len(data.train) + len(data.val) == len(text)


@pytest.mark.parametrize(
    "content,match",
    [
        (b"", "is empty"),
        (b"ab\xff\xfecd", r"not valid UTF-8: byte offset 2 \(ff fe 63 64\)"),
        (b"too short", "has 9 characters; context 8 needs at least"),
    ],
    ids=["empty", "invalid-utf8", "too-short"],
)
def test_bad_data_files(tmp_path, content, match):
    path = tmp_path / "data.txt"
    path.write_bytes(content)
    with pytest.raises(DataError, match=match):
        text, source = load_text(path)
        CharDataset.from_text(text, 8, source)


def test_missing_file_and_minimum_length(tmp_path):
    with pytest.raises(DataError, match="is not a readable file"):
        load_text(tmp_path / "nope.txt")
    for context in (1, 8, 64):
        n = min_chars(context)
        CharDataset.from_text("x" * n, context)  # exactly enough
        with pytest.raises(DataError, match="needs at least"):
            CharDataset.from_text("x" * (n - 1), context)


def test_batches_are_shifted_windows_and_seeded(tmp_path):
    text = "".join(chr(ord("a") + i % 26) for i in range(1000))
    data = CharDataset.from_text(text, 8)
    x, y = data.batch("train", 5, 8, np.random.default_rng(1))
    assert x.shape == y.shape == (5, 8) and x.dtype == np.int32
    np.testing.assert_array_equal((x + 1) % 26, y)  # the next letter of the alphabet
    x2, _ = data.batch("train", 5, 8, np.random.default_rng(1))
    np.testing.assert_array_equal(x, x2)
    xv, _ = data.batch("val", 64, 8, np.random.default_rng(2))
    assert xv.max() < 26 and len(data.val) == 100


def test_schedule_warmup_then_cosine():
    base, warm, total = 1e-3, 10, 110
    assert lr_at(0, base, warm, total) == pytest.approx(base / 10)
    assert lr_at(9, base, warm, total) == pytest.approx(base)
    assert lr_at(10, base, warm, total) == pytest.approx(base)
    mid = lr_at(60, base, warm, total)  # halfway through the cosine: the mean of peak and floor
    assert mid == pytest.approx(0.5 * (base + 0.1 * base))
    assert lr_at(110, base, warm, total) == pytest.approx(0.1 * base)
    quarter = lr_at(35, base, warm, total)
    assert quarter == pytest.approx(0.1 * base + 0.5 * (1 + math.cos(math.pi / 4)) * 0.9 * base)


def _meta(step):
    return {"step": step, "rng": np.random.default_rng(5).bit_generator.state, "note": "x"}


def test_checkpoint_round_trip(tmp_path):
    weights = {
        "a.weight": np.arange(6, dtype=np.float32).reshape(2, 3),
        "b": np.ones(4, np.float64),
    }
    optim = [
        {"step": 3, "m": [np.full(2, 0.5, np.float32)], "pairs": {0: np.zeros(1)}},
        {"step": 3, "shape": (2, 3)},
    ]
    path = save_checkpoint(tmp_path, weights, optim, _meta(3))
    assert path.parent == tmp_path and (tmp_path / "LATEST").read_text().strip() == path.name
    got = load_checkpoint(tmp_path)
    assert got.step == 3 and got.path == path
    for k, v in weights.items():
        assert got.weights[k].dtype == v.dtype
        np.testing.assert_array_equal(got.weights[k], v)
    assert got.optimizer[0]["step"] == 3 and got.optimizer[1]["shape"] == (2, 3)
    np.testing.assert_array_equal(got.optimizer[0]["m"][0], optim[0]["m"][0])
    assert list(got.optimizer[0]["pairs"]) == [0]
    assert got.meta["rng"] == _meta(3)["rng"]
    assert load_checkpoint(path).step == 3  # a checkpoint folder works too


def test_checkpoint_failure_mid_write_keeps_previous(tmp_path, monkeypatch):
    good = {"w": np.full(3, 1.0, np.float32)}
    first = save_checkpoint(tmp_path, good, [], _meta(1))
    calls = []

    def failing_save(tensors, filename, *a, **k):
        calls.append(filename)
        if len(calls) == 2:  # the weights are written, then the optimizer file fails
            raise OSError("disk full")
        return real_save(tensors, filename, *a, **k)

    real_save = ckpt_mod.save_file
    monkeypatch.setattr(ckpt_mod, "save_file", failing_save)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(tmp_path, {"w": np.full(3, 2.0, np.float32)}, [], _meta(2))
    monkeypatch.undo()
    got = load_checkpoint(tmp_path)
    assert got.step == 1 and got.path == first
    np.testing.assert_array_equal(got.weights["w"], good["w"])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([first.name, "LATEST"])
    second = save_checkpoint(tmp_path, {"w": np.full(3, 2.0, np.float32)}, [], _meta(2))
    assert load_checkpoint(tmp_path).step == 2
    assert not first.exists() and second.exists()  # the older one goes once the new is live


def test_checkpoint_missing_gives_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="holds no checkpoint"):
        load_checkpoint(tmp_path)
