"""The training loop: batches, loss head, AdamW with warm-up + cosine, eval, checkpoints.

Everything that decides the next loss lives in the checkpoint: weights, both optimizers'
state, the batch generator's bit state and the step. The schedule is a function of the
step and validation batches come from their own fixed generator, so a run resumed from a
checkpoint continues with the very losses (bit for bit, on cpu) of one never interrupted.

The loss head is pluggable (``heads.py``): autograd's cross-entropy by default, or any
objective that returns its own gradient with respect to the logits.

A run that diverges stops at once: a non-finite training or validation loss raises
:class:`DivergenceError`, and no checkpoint is ever written from non-finite weights, so the
last one saved is the last good state. SIGINT and SIGTERM both finish the current step,
save and return (a second signal leaves at once, without a checkpoint).
"""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import creation, ops
from ..autograd import Variable, cross_entropy, no_grad
from ..device import Device
from ..device import device as as_device
from ..errors import DomainError, RiftcoError
from ..nn import GPT
from ..optim import AdamW, grad_norm
from ..replay import capture
from ..tensor import Tensor
from . import restore
from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from .checks import COUNT, FRACTION, NON_NEGATIVE, POSITIVE, POSITIVE_INT, UNIT
from .data import CharDataset, load_text
from .heads import as_head, label_smoothing_head
from .precision import (
    MIN_SCALE,
    PRECISIONS,
    LossScaler,
    check_device,
    compute_copies,
    precision,
    unscale,
)
from .progress import LINE_EVERY_S, make_progress
from .schedule import lr_at

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class DivergenceError(RiftcoError, ArithmeticError):
    """The loss or the weights stopped being finite; the run cannot continue from here."""


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
    precision: str = "fp32"  # or "bf16-mixed", "fp16-mixed" (riftco.train.precision)
    # fp16-mixed: good steps in a row before the loss scale doubles (docs/DECISIONS.md,
    # "Mixed-precision training": PyTorch's 2,000 would never grow it in a 1,000-step run)
    loss_scale_interval: int = 200

    def validate(self) -> None:
        """Reject values that would train on NaN or crash later (``nan`` passes ``> 0``)."""
        for name, rule in (
            ("steps", POSITIVE_INT),
            ("batch_size", POSITIVE_INT),
            ("eval_every", POSITIVE_INT),
            ("eval_iters", POSITIVE_INT),
            ("warmup", COUNT),
            ("seed", COUNT),
            ("lr", POSITIVE),
            ("min_lr_ratio", UNIT),
            ("weight_decay", NON_NEGATIVE),
            ("beta2", FRACTION),
            ("grad_clip", NON_NEGATIVE),
            ("label_smoothing", FRACTION),
            ("loss_scale_interval", POSITIVE_INT),
        ):
            rule.check("train", name, getattr(self, name))
        if self.precision not in PRECISIONS:
            raise DomainError(
                f"[train] precision must be one of {', '.join(PRECISIONS)}; got {self.precision!r}"
            )


def mean_label(losses: list[tuple[int, float]]) -> str:
    """``mean of steps 81-100``: which steps' losses a reported training loss averages."""
    if not losses:
        return "no steps"
    first, last = losses[0][0], losses[-1][0]
    return f"mean of step {last}" if first == last else f"mean of steps {first}-{last}"


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
    stop_signal: int | None = None  # SIGINT or SIGTERM when a signal stopped the run
    # fp16-mixed: every change of the loss scale, (step, old, new, skipped), and the count
    # of steps skipped because their gradients overflowed
    loss_scale_events: list[tuple[int, float, float, bool]] = field(default_factory=list)
    skipped_steps: int = 0

    @property
    def final_train_loss(self) -> float:
        """Mean of the last 20 steps' losses: one batch's loss is too noisy to report."""
        tail = [loss for _, loss in self.train_losses[-20:]]
        return float(np.mean(tail)) if tail else float("nan")

    @property
    def final_train_loss_label(self) -> str:
        """Which steps :attr:`final_train_loss` averages, as the summary line names them."""
        return mean_label(self.train_losses[-20:])

    @property
    def final_val_loss(self) -> float:
        return self.val_losses[-1][1] if self.val_losses else float("nan")

    @property
    def final_val_loss_label(self) -> str:
        return f"validation at step {self.val_losses[-1][0]}" if self.val_losses else "none"


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
    last_checkpoint: Path | None = None  # the newest complete checkpoint of this run
    # Replay the recorded step (riftco.capture): the same bits as running it, without its
    # Python; a run-time choice, so not part of a checkpoint. None: on with riftco's own
    # loss heads, off with a custom one (its Python may keep state a replay would skip).
    capture: bool | None = None

    def __post_init__(self) -> None:
        self.cfg.validate()
        self._own_head = self.head is None
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
        self._stop_signal: int | None = None
        self.precision = precision(self.cfg.precision)
        check_device(self.precision, self.device, self.model.params_dtype)
        self.scaler = LossScaler(self.cfg.loss_scale_interval) if self.precision.scaled else None
        self._log: list[str] = []  # lines for the run's log (loss scale changes)
        # The recorded step (fp16-mixed: its forward and backward, the update apart)
        self._captured: Callable[..., Any] | None = None
        self._captured_update: Callable[..., Any] | None = None

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
        for opt in self.optimizers:
            opt.lr = lr  # what a checkpoint saves; a replayed step takes lr as its argument
        if self._captured is None:
            on = self._own_head if self.capture is None else self.capture
            first: Callable[..., Any] = self._step if self.scaler is None else self._scaled_grads
            self._captured = capture(first, warn=False) if on else first
            if self.scaler is not None:
                self._captured_update = capture(self._update, warn=False) if on else self._update
        xs, ys = self._upload(x), self._upload(y.reshape(-1))
        if self.scaler is None:
            value = float(self._captured(xs, ys, lr).item())
        else:
            value = self._scaled_step(xs, ys, lr)
        self.step += 1
        self.train_losses.append((self.step, value))
        if not math.isfinite(value):
            raise self._diverged(f"the training loss is {value} at step {self.step} (lr {lr:.3g})")
        return value

    def _step(self, x: Tensor, y: Tensor, lr: float) -> Tensor:
        """Forward, backward and update: what ``riftco.capture`` records and replays."""
        loss = self._loss_and_backward(x, y)
        # Clipping inside the update: the norm stays on the device and both optimizers
        # scale by it as they step (the bits clip_grad_norm + step gave, minus its passes).
        norm = grad_norm(self.params) if self.cfg.grad_clip > 0 else None
        self._update(norm, lr)
        return loss

    def _loss_and_backward(self, x: Tensor, y: Tensor, scale: float | None = None) -> Tensor:
        """The forward on the compute-dtype copies and the head's backward (seeded with the
        loss scale ``scale`` under fp16-mixed) into the float32 masters' gradients. A head
        is asked for ``scale`` only when there is one: a custom head written before loss
        scaling takes ``(logits, targets)`` alone."""
        with compute_copies(self.model, self.precision.compute):
            logits = self.model(x)  # (B*T, V)
            if scale is None:
                return self.head.loss_and_backward(logits, y)
            return self.head.loss_and_backward(logits, y, scale)

    def _update(self, norm: Tensor | None, lr: float, *masters: Variable) -> None:
        """Both AdamW steps. Recorded alone (fp16-mixed), the call publishes no gradient, so
        the parameters it writes in place come in as ``masters`` (a recording reads its
        arguments afresh on every replay); the optimizers reach them as before."""
        for opt in self.optimizers:
            opt.lr = lr
            opt.step(grad_norm=norm, max_norm=self.cfg.grad_clip)

    # -- fp16-mixed: a scaled backward, one download, then the update or a skip ----------------
    def _scaled_step(self, x: Tensor, y: Tensor, lr: float) -> float:
        """The loss and the gradients' norm come down together in one read (the loss
        download every step makes anyway); a non-finite norm means some gradient overflowed
        (or is NaN), and the update is then not run at all: parameters, moments and AdamW's
        step counts stay as they were. The decision needs that read, so the update is a
        second recorded call after it rather than part of the first."""
        scaler = self.scaler
        assert scaler is not None and self._captured is not None
        assert self._captured_update is not None
        packed, norm = self._captured(x, y, scaler.scale, 1.0 / scaler.scale)
        loss, norm_value = (float(v) for v in packed.numpy())
        finite = math.isfinite(norm_value)
        if finite and math.isfinite(loss):
            self._captured_update(norm if self.cfg.grad_clip > 0 else None, lr, *self.params)
        line = scaler.update(self.step + 1, finite)
        if line is not None:
            self._log.append(line)
        if scaler.scale < MIN_SCALE:
            raise self._diverged(
                f"the float16 gradients kept overflowing until the loss scale fell to "
                f"{scaler.scale:g} at step {self.step + 1}",
                "the weights are those of the last step that was not skipped",
                "--precision bf16-mixed or fp32 (or a lower lr)",
            )
        return loss

    def _scaled_grads(
        self, x: Tensor, y: Tensor, scale: float, inv_scale: float
    ) -> tuple[Tensor, Tensor]:
        """Forward and backward with the seed ``scale``; the float32 master gradients
        divided by it again; ``([loss, norm], norm)`` with ``norm`` their global L2 norm,
        finite exactly when every gradient is (a float32 sum of squares of gradients cast
        from float16, at most 65504^2 each, cannot overflow before ~10^28 elements)."""
        loss = self._loss_and_backward(x, y, scale)
        unscale(self.params, inv_scale)
        norm = grad_norm(self.params)
        pair = [ops.cast(loss, norm.dtype).reshape((1,)), norm.reshape((1,))]  # cast: a no-op
        return ops.concatenate_last_axis(pair), norm

    def _diverged(
        self,
        what: str,
        state: str = "the weights in memory are unusable",
        advice: str = "a lower lr (or more warm-up, or grad clipping)",
    ) -> DivergenceError:
        if self.last_checkpoint is not None:
            kept = f"the last good checkpoint is intact: {self.last_checkpoint}"
        elif self.out is not None:
            kept = f"no checkpoint was written to {self.out}"
        else:
            kept = "nothing was saved (no output directory)"
        return DivergenceError(
            f"[train] {what}; training stopped and {state}; {kept}. Start again with {advice}"
        )

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
        with no_grad(), compute_copies(self.model, self.precision.compute):
            losses = [cross_entropy(self.model(x), y).value.item() for x, y in self._val]
        value = float(np.mean(losses))
        self.val_losses.append((self.step, value))
        if not math.isfinite(value):
            raise self._diverged(f"the validation loss is {value} at step {self.step}")
        return value

    # -- checkpoints -----------------------------------------------------------------------------
    def save(self) -> Path | None:
        """Write a checkpoint; refuses (DivergenceError) when any weight or optimizer moment
        is not finite, so ``LATEST`` keeps naming the last good state."""
        if self.out is None:
            return None
        weights = self.model.state_dict()
        optim = [opt.state_dict() for opt in self.optimizers]
        moments = [
            (f"optimizer {k}[{i}].{key}", st[key])
            for k, o in enumerate(optim)
            for i, st in enumerate(o["state"])
            if st is not None
            for key in ("m", "v")
        ]
        for name, arr in [*weights.items(), *moments]:
            if not np.isfinite(arr).all():
                raise self._diverged(f"{name} holds non-finite values at step {self.step}")
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
        if self.scaler is not None:
            meta["loss_scale"] = self.scaler.state_dict()
        self.last_checkpoint = save_checkpoint(self.out, weights, optim, meta)
        return self.last_checkpoint

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
        """Continue the run saved in ``path`` (writing to ``out``, by default ``path``).

        Everything is read and checked before the trainer exists: a damaged or foreign
        checkpoint is a CheckpointError naming the file."""
        ckpt = load_checkpoint(path)
        meta = ckpt.meta
        cfg = restore.build(ckpt, "train", TrainConfig, "training config")
        if steps is not None and steps < ckpt.step:  # it would print "step 60 of 10"
            raise DomainError(
                f"[train] --steps {steps} is below the step the run in {path} has reached "
                f"({ckpt.step}): --steps is the run's total, so give more than {ckpt.step} "
                "to extend it"
            )
        if steps is not None:
            cfg.steps = steps
        try:
            cfg.validate()
        except DomainError as exc:
            raise CheckpointError(f"[checkpoint] {ckpt.path}: 'train' is invalid: {exc}") from None
        model, tok = restore.model_and_tokenizer(ckpt, as_device(device), seed=cfg.seed)
        source = data_path if data_path is not None else restore.field_of(ckpt, "data")
        text, name = load_text(source)
        data = CharDataset.from_text(text, model.config.context, name, tokenizer=tok)
        trainer = cls(model, data, cfg, Path(out if out is not None else path), source, head)
        restore.load_optimizers(ckpt, trainer.optimizers)
        try:
            trainer.rng.bit_generator.state = restore.field_of(ckpt, "rng")
            trainer.train_losses = [(int(s), float(v)) for s, v in meta["train_losses"]]
            trainer.val_losses = [(int(s), float(v)) for s, v in meta["val_losses"]]
        except (TypeError, ValueError, KeyError) as exc:
            raise CheckpointError(
                f"[checkpoint] {ckpt.path}: the batch generator state or loss history is "
                f"malformed: {exc!r}"
            ) from None
        if trainer.scaler is not None:
            state = restore.field_of(ckpt, "loss_scale")
            try:
                trainer.scaler.load_state_dict(state)
            except (TypeError, ValueError, KeyError, AttributeError) as exc:
                raise CheckpointError(
                    f"[checkpoint] {ckpt.path}: the loss scale state is malformed: {exc}"
                ) from None
        trainer.step = ckpt.step
        trainer.last_checkpoint = ckpt.path
        return trainer

    # -- the loop --------------------------------------------------------------------------------
    def request_stop(self) -> None:
        """Finish the current step, save a checkpoint and return (what Ctrl-C does)."""
        self._stop = True

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self._stop_signal is not None:  # a second signal: leave now, without a checkpoint
            raise KeyboardInterrupt
        self._stop, self._stop_signal = True, signum

    def _eval_line(self, val_loss: float) -> str:
        """The line at an evaluation: three losses, each named for what it averages."""
        recent = self.train_losses[-self.cfg.eval_every :]
        mean = float(np.mean([v for _, v in recent])) if recent else float("nan")
        return (
            f"step {self.step}: train loss {mean:.3f} ({mean_label(recent)}), "
            f"val loss {val_loss:.3f} (held-out batches)"
        )

    def _step_stats(self, loss: float) -> str:
        """The progress bar's losses: this step's alone, and the last validation's with its step."""
        if not self.val_losses:
            return f"step loss {loss:.3f}"
        at, val = self.val_losses[-1]
        return f"step loss {loss:.3f}, val loss {val:.3f} (step {at})"

    def run(
        self,
        progress: bool | str | Any = True,
        on_step: Callable[[Trainer, float], bool | None] | None = None,
        log: Callable[[str], None] | None = None,
        progress_every_s: float = LINE_EVERY_S,
    ) -> TrainResult:
        """Train to ``cfg.steps``. ``on_step`` returning True stops early (with a checkpoint).

        ``progress``: True (``"auto"``: a bar on a terminal, plain lines otherwise),
        ``"bar"``, ``"lines"`` (one every ``progress_every_s``), False, or an object with
        ``update(step, stats)`` and ``close()``. ``log`` receives one line per evaluation
        (the CLI passes ``tqdm.write`` so lines scroll above a bar)."""
        self._stop, self._stop_signal = False, None
        previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            previous = {s: signal.signal(s, self._on_signal) for s in STOP_SIGNALS}
        tokens_per_step = self.cfg.batch_size * self.model.config.context
        step_time, steps_done = 0.0, 0
        saved, saved_step = None, None
        start = time.perf_counter()
        bar = make_progress(progress, self.cfg.steps, self.step, every_s=progress_every_s)
        try:
            while self.step < self.cfg.steps and not self._stop:
                t0 = time.perf_counter()
                loss = self.train_step()
                step_time += time.perf_counter() - t0
                steps_done += 1
                for line in self._log:
                    if log is not None:
                        log(line)
                self._log.clear()
                last = self.step == self.cfg.steps
                if self.step % self.cfg.eval_every == 0 or last:
                    val_loss = self.evaluate()
                    saved, saved_step = self.save(), self.step
                    if log is not None:
                        log(self._eval_line(val_loss))
                if on_step is not None and on_step(self, loss):
                    self._stop = True
                bar.update(
                    self.step,
                    f"{self._step_stats(loss)}, {tokens_per_step * steps_done / step_time:,.0f} "
                    f"tok/s, {1000 * step_time / steps_done:.0f} ms/step",
                )
        finally:
            bar.close()
            for signum, handler in previous.items():
                if handler is not None:  # None: installed outside Python, cannot be restored
                    signal.signal(signum, handler)
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
            stop_signal=self._stop_signal if interrupted else None,
            loss_scale_events=list(self.scaler.events) if self.scaler else [],
            skipped_steps=self.scaler.skipped if self.scaler else 0,
        )
