"""What the training tests share: a small corpus from the bundled text and a tiny trainer.

Kept apart from ``helpers`` so that only the tests that train import ``riftco.train``.
"""

from __future__ import annotations

from typing import Any

from riftco.nn import GPT, GPTConfig
from riftco.train.data import CharDataset, load_text
from riftco.train.loop import TrainConfig, Trainer


def head_corpus(tmp_path_factory: Any, context: int = 8, chars: int = 20_000) -> CharDataset:
    """The first ``chars`` characters of the bundled text, written to a file (checkpoints and
    ``--data`` name it) and read back as a dataset; ``.path`` is that file."""
    path = tmp_path_factory.mktemp("data") / "head.txt"
    path.write_text(load_text(None)[0][:chars], encoding="utf-8")
    data = CharDataset.from_text(path.read_text(encoding="utf-8"), context, str(path))
    data.path = str(path)  # type: ignore[attr-defined]
    return data


def tiny_trainer(corpus: Any, out: Any, head: Any, model: dict[str, Any], **train: Any) -> Trainer:
    """A Trainer of a GPT (``model``: GPTConfig fields but the vocabulary) on ``corpus``, on
    the CPU from seed 0; ``train`` sets TrainConfig fields."""
    mcfg = GPTConfig(vocab=corpus.tokenizer.vocab_size, **model)
    tcfg = TrainConfig()
    for k, v in train.items():
        setattr(tcfg, k, v)
    return Trainer(GPT(mcfg, device="cpu", seed=0), corpus, tcfg, out, corpus.path, head)


def tiny_device_trainer(
    device: Any, attention: str, capture: bool = False, **train: Any
) -> Trainer:
    """The step tests' trainer on ``device``: a one-layer GPT (context 8, width 16, two heads,
    ``attention``) from seed 0 on the bundled text's first 20,000 characters, batches of 2,
    gradient clipping at 1 (``train`` sets other TrainConfig fields), replayed by
    riftco.capture when ``capture``."""
    text, source = load_text(None)
    data = CharDataset.from_text(text[:20_000], 8, source)
    cfg = GPTConfig(
        vocab=data.tokenizer.vocab_size, context=8, layers=1, heads=2, width=16,
        attention=attention,
    )  # fmt: skip
    tcfg = TrainConfig(steps=4, batch_size=2, grad_clip=1.0, **train)
    return Trainer(GPT(cfg, device=device, seed=0), data, tcfg, capture=capture)
