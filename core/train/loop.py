"""The training loop: batches, loss head, AdamW with warm-up + cosine, eval, checkpoints.

Everything that decides the next loss lives in the checkpoint: weights, both optimizers'
state, the batch generator's bit state and the step. The schedule is a function of the
step and validation batches come from their own fixed generator, so a run resumed from a
checkpoint continues with the very losses (bit for bit, on cpu) of one never interrupted.

The loss head is pluggable. The default runs autograd's ``cross_entropy`` and backward
from the scalar loss. Any object with ``loss_and_grad(logits [N, V], targets [N]) ->
(loss, dlogits)`` (raw Tensors, e.g. a compiled ``riftco.symbolic`` objective) works too:
its ``dlogits`` seeds ``logits.backward(seed=dlogits)`` through the network.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from .. import creation
from ..autograd import Variable, cross_entropy, no_grad
from ..device import Device
from ..device import device as as_device
from ..nn import GPT, GPTConfig
from ..optim import AdamW, clip_grad_norm
from ..tensor import Tensor
from .checkpoint import load_checkpoint, save_checkpoint
from .data import CharDataset, load_text
from .schedule import lr_at
from .tokenizer import CharTokenizer


@dataclass
class TrainConfig:
    steps: int = 600
    batch_size: int = 32
    lr: float = 3e-3
    warmup: int = 50
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    beta2: float = 0.95
    grad_clip: float = 1.0  # 0 disables
    eval_every: int = 100
    eval_iters: int = 8
    seed: int = 0
    label_smoothing: float = 0.0  # > 0: the loss head is a compiled objective (riftco.symbolic)


@dataclass
class TrainResult:
    step: int
    train_losses: list[tuple[int, float]]
    val_losses: list[tuple[int, float]]
    tokens_per_s: float
    ms_per_step: float
    wall_s: float
    interrupted: bool
    checkpoint: Path | None

    @property
    def final_train_loss(self) -> float:
        """Mean of the last 20 steps' losses: one batch's loss is too noisy to report."""
        tail = [loss for _, loss in self.train_losses[-20:]]
        return float(np.mean(tail)) if tail else float("nan")

    @property
    def final_val_loss(self) -> float:
        return self.val_losses[-1][1] if self.val_losses else float("nan")


# -- loss heads ------------------------------------------------------------------------------------
class Objective(Protocol):
    def loss_and_grad(self, logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]: ...


class CrossEntropyHead:
    """Default head: autograd cross-entropy, backward from the scalar loss."""

    def loss_and_backward(self, logits: Variable, targets: Tensor) -> Tensor:
        loss = cross_entropy(logits, targets)
        loss.backward()
        return loss.value


class SeededHead:
    """An objective that returns d(loss)/d(logits) itself; that gradient seeds the network."""

    def __init__(self, objective: Objective) -> None:
        self.objective = objective

    def loss_and_backward(self, logits: Variable, targets: Tensor) -> Tensor:
        loss, dlogits = self.objective.loss_and_grad(logits.value, targets)
        logits.backward(seed=dlogits)
        return loss


def label_smoothing_head(vocab: int, eps: float) -> Objective:
    """Cross-entropy against ``(1 - eps) * onehot + eps / V``, differentiated once by
    riftco.symbolic: a new loss in a few builder lines, no new autograd rule. Validation
    still reports plain cross-entropy, so runs with and without smoothing compare."""
    from ..symbolic import label_smoothing_objective

    return label_smoothing_objective(vocab, eps)


def as_head(head: Any) -> Any:
    if head is None:
        return CrossEntropyHead()
    if hasattr(head, "loss_and_backward"):
        return head
    if hasattr(head, "loss_and_grad"):
        return SeededHead(head)
    raise TypeError(
        f"[train] a loss head needs loss_and_grad() or loss_and_backward(); got {head!r}"
    )


# -- the trainer -----------------------------------------------------------------------------------
@dataclass
class Trainer:
    model: GPT
    data: CharDataset
    cfg: TrainConfig
    out: Path | None = None
    data_path: str | None = None
    head: Any = None
    step: int = 0
    train_losses: list[tuple[int, float]] = field(default_factory=list)
    val_losses: list[tuple[int, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.head is None and self.cfg.label_smoothing > 0:
            self.head = label_smoothing_head(self.model.config.vocab, self.cfg.label_smoothing)
        self.head = as_head(self.head)
        if self.data_path is not None:  # a resume may start from another directory
            self.data_path = str(Path(self.data_path).resolve())
        named = list(self.model.named_parameters())
        # Like GPT-2: decay matrices and embeddings, not gains and biases.
        decay = [p for _, p in named if len(p.shape) >= 2]
        plain = [p for _, p in named if len(p.shape) < 2]
        b2 = (0.9, self.cfg.beta2)
        self.optimizers = [
            AdamW(decay, lr=self.cfg.lr, betas=b2, weight_decay=self.cfg.weight_decay),
            AdamW(plain, lr=self.cfg.lr, betas=b2, weight_decay=0.0),
        ]
        self.params = [p for _, p in named]
        self.rng = np.random.default_rng(self.cfg.seed)  # training windows only
        self._val: list[tuple[Tensor, Tensor]] | None = None
        self._stop = False

    @property
    def device(self) -> Device:
        return self.model.device

    def _upload(self, x: np.ndarray) -> Tensor:
        return creation.tensor(x, device=self.device)

    # -- one step and one evaluation -----------------------------------------------------------
    def train_step(self) -> float:
        ctx = self.model.config.context
        x, y = self.data.batch("train", self.cfg.batch_size, ctx, self.rng)
        lr = lr_at(self.step, self.cfg.lr, self.cfg.warmup, self.cfg.steps, self.cfg.min_lr_ratio)
        logits = self.model(self._upload(x))  # (B*T, V)
        loss = self.head.loss_and_backward(logits, self._upload(y.reshape(-1)))
        if self.cfg.grad_clip > 0:
            clip_grad_norm(self.params, self.cfg.grad_clip)
        for opt in self.optimizers:
            opt.lr = lr
            opt.step()
        self.step += 1
        value = float(loss.item())
        self.train_losses.append((self.step, value))
        return value

    def evaluate(self) -> float:
        """Mean validation loss over the same fixed batches every time (comparable points)."""
        if self._val is None:
            rng = np.random.default_rng([self.cfg.seed, 7919])
            ctx = self.model.config.context
            batches = [
                self.data.batch("val", self.cfg.batch_size, ctx, rng)
                for _ in range(max(self.cfg.eval_iters, 1))
            ]
            self._val = [(self._upload(x), self._upload(y.reshape(-1))) for x, y in batches]
        with no_grad():
            losses = [cross_entropy(self.model(x), y).value.item() for x, y in self._val]
        value = float(np.mean(losses))
        self.val_losses.append((self.step, value))
        return value

    # -- checkpoints -----------------------------------------------------------------------------
    def save(self) -> Path | None:
        if self.out is None:
            return None
        meta = {
            "step": self.step,
            "model": self.model.config.to_dict(),
            "train": asdict(self.cfg),
            "dtype": np.dtype(self.model.params_dtype).name,
            "tokenizer": self.data.tokenizer.to_dict(),
            "data": self.data_path,
            "rng": self.rng.bit_generator.state,
            "train_losses": self.train_losses,
            "val_losses": self.val_losses,
        }
        optim = [opt.state_dict() for opt in self.optimizers]
        return save_checkpoint(self.out, self.model.state_dict(), optim, meta)

    @classmethod
    def resume(
        cls,
        path: str | Path,
        device: str | Device | None = None,
        out: str | Path | None = None,
        steps: int | None = None,
        data_path: str | None = None,
        head: Any = None,
    ) -> Trainer:
        """Continue the run saved in ``path`` (writing to ``out``, by default ``path``)."""
        ckpt = load_checkpoint(path)
        meta = ckpt.meta
        cfg = TrainConfig(**meta["train"])
        if steps is not None:
            cfg.steps = steps
        mcfg = GPTConfig(**meta["model"])
        model = GPT(mcfg, device=as_device(device), dtype=np.dtype(meta["dtype"]), seed=cfg.seed)
        model.load_state_dict(ckpt.weights)
        source = data_path if data_path is not None else meta["data"]
        text, name = load_text(source)
        tok = CharTokenizer.from_dict(meta["tokenizer"])
        data = CharDataset.from_text(text, mcfg.context, name, tokenizer=tok)
        trainer = cls(model, data, cfg, Path(out if out is not None else path), source, head)
        for opt, state in zip(trainer.optimizers, ckpt.optimizer, strict=True):
            opt.load_state_dict(state)
        trainer.rng.bit_generator.state = meta["rng"]
        trainer.step = ckpt.step
        trainer.train_losses = [tuple(p) for p in meta["train_losses"]]
        trainer.val_losses = [tuple(p) for p in meta["val_losses"]]
        return trainer

    # -- the loop --------------------------------------------------------------------------------
    def request_stop(self) -> None:
        """Finish the current step, save a checkpoint and return (what Ctrl-C does)."""
        self._stop = True

    def _on_sigint(self, signum: int, frame: Any) -> None:
        if self._stop:  # a second Ctrl-C: leave now, without a checkpoint
            raise KeyboardInterrupt
        self._stop = True

    def run(
        self,
        progress: bool = True,
        on_step: Callable[[Trainer, float], bool | None] | None = None,
        log: Callable[[str], None] | None = None,
    ) -> TrainResult:
        """Train to ``cfg.steps``. ``on_step`` returning True stops early (with a checkpoint).

        ``log`` receives one line per evaluation (the CLI passes ``tqdm.write`` so lines
        scroll above the progress bar)."""
        from tqdm import tqdm

        self._stop = False
        previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGINT, self._on_sigint)
        tokens_per_step = self.cfg.batch_size * self.model.config.context
        step_time, steps_done = 0.0, 0
        saved, saved_step = None, None
        start = time.perf_counter()
        bar = tqdm(
            total=self.cfg.steps,
            initial=self.step,
            disable=not progress,
            unit="step",
            dynamic_ncols=True,
            leave=True,
        )
        try:
            while self.step < self.cfg.steps and not self._stop:
                t0 = time.perf_counter()
                loss = self.train_step()
                step_time += time.perf_counter() - t0
                steps_done += 1
                last = self.step == self.cfg.steps
                if self.step % self.cfg.eval_every == 0 or last:
                    val_loss = self.evaluate()
                    saved, saved_step = self.save(), self.step
                    if log is not None:
                        recent = np.mean([v for _, v in self.train_losses[-self.cfg.eval_every :]])
                        log(f"step {self.step}: train loss {recent:.3f}, val loss {val_loss:.3f}")
                if on_step is not None and on_step(self, loss):
                    self._stop = True
                val = f"{self.val_losses[-1][1]:.3f}" if self.val_losses else "-"
                bar.set_postfix_str(
                    f"loss {loss:.3f} val {val} {tokens_per_step * steps_done / step_time:,.0f} "
                    f"tok/s {1000 * step_time / steps_done:.0f} ms/step",
                    refresh=False,
                )
                bar.update(1)
        finally:
            bar.close()
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
        interrupted = self._stop and self.step < self.cfg.steps
        if saved_step != self.step:
            saved = self.save()
        return TrainResult(
            step=self.step,
            train_losses=list(self.train_losses),
            val_losses=list(self.val_losses),
            tokens_per_s=tokens_per_step * steps_done / step_time if step_time else 0.0,
            ms_per_step=1000 * step_time / steps_done if steps_done else 0.0,
            wall_s=time.perf_counter() - start,
            interrupted=interrupted,
            checkpoint=saved,
        )
