"""``ml.fit``: the training loop around a compiled ``train_step``, with progress, history, callbacks,
evaluation and checkpoints that a killed run resumes from.

Example:
    >>> state, history = ml.fit(pm, pm.init_state(), batches, epochs=3, eval_batches=held_out,
    ...                         checkpoint_dir="runs/mlp", resume=True)                  # doctest: +SKIP
    >>> final_loss, final_eval = history.loss[-1], history.epochs[-1].get("eval_loss")   # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import os
import re
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import validation
from ..errors import ArgumentError, CheckpointError
from ..lazy_numpy import np
from ..optim.state import TrainState
from ..progress import task
from ..serialization.files import write_file_atomically
from ..serialization.safetensors import parse_json
from .checkpoint import load_state, manifest_path, save_state

__all__ = ["Callback", "EarlyStopping", "History", "LambdaCallback", "fit"]

_CHECKPOINT = re.compile(r"^step-(\d{1,12})\.safetensors$")


@dataclass
class History:
    """What :func:`fit` recorded: ``loss`` per step, and per epoch a dict of ``loss`` (mean training loss),
    the model's metrics averaged over the epoch's batches, and ``eval_loss``/``eval_<metric>`` over
    ``eval_batches``. A loss that is not finite stops training with a warning; ``diverged_at`` is that step."""

    loss: list[float] = field(default_factory=list)
    epochs: list[dict[str, float]] = field(default_factory=list)
    diverged_at: int | None = None  # the step whose loss was not finite (training stopped there)


class Callback:
    """Hooks :func:`fit` calls; set ``self.stop = True`` to end training after the current step.

    >>> class Print(Callback):
    ...     def on_epoch_end(self, epoch, logs):
    ...         print(epoch, round(logs["loss"], 3))
    """

    stop: bool = False

    def on_train_begin(self, state: TrainState) -> None:
        """Before the first step (after a resume: before the first step not yet done)."""

    def on_step_end(self, step: int, logs: Mapping[str, float]) -> None:
        """After each step; ``logs`` holds ``loss`` and the metrics of that batch."""

    def on_epoch_end(self, epoch: int, logs: Mapping[str, float]) -> None:
        """After each epoch; ``logs`` is the epoch's entry of :class:`History`."""

    def on_train_end(self, state: TrainState, history: History) -> None:
        """After the last step."""


class EarlyStopping(Callback):
    """Stop when ``monitor`` (an epoch log: ``"eval_loss"``, ``"loss"``, ``"eval_accuracy"``...) has not
    improved by ``min_delta`` for ``patience`` epochs; ``mode`` ``"min"`` or ``"max"``.

    >>> EarlyStopping(monitor="eval_loss", patience=2).patience
    2
    """

    def __init__(
        self, monitor: str = "eval_loss", patience: int = 3, min_delta: float = 0.0, mode: str = "min"
    ) -> None:
        self.monitor = monitor
        self.patience = int(validation.positive_int("EarlyStopping", "patience", patience))
        self.min_delta = float(validation.number("EarlyStopping", "min_delta", min_delta, low=0.0))
        self.mode = validation.choice("EarlyStopping", "mode", mode, ("min", "max"))
        self.best: float | None = None
        self.waited = 0
        self.stop = False

    def on_epoch_end(self, epoch: int, logs: Mapping[str, float]) -> None:
        if self.monitor not in logs:
            raise ArgumentError(f"EarlyStopping(monitor={self.monitor!r}): the epoch logs hold {sorted(logs)}")
        value = float(logs[self.monitor])
        better = self.best is None or (
            value < self.best - self.min_delta if self.mode == "min" else value > self.best + self.min_delta
        )
        if better:
            self.best, self.waited = value, 0
        else:
            self.waited += 1
            self.stop = self.waited >= self.patience


class LambdaCallback(Callback):
    """A callback from functions: ``LambdaCallback(on_step_end=lambda step, logs: ...)``.

    >>> seen = []
    >>> LambdaCallback(on_epoch_end=lambda epoch, logs: seen.append(epoch)).on_epoch_end(0, {})
    >>> seen
    [0]
    """

    def __init__(self, **hooks: Callable[..., Any]) -> None:
        names = ("on_train_begin", "on_step_end", "on_epoch_end", "on_train_end")
        for name, hook in hooks.items():
            if name not in names or not callable(hook):
                raise ArgumentError(f"LambdaCallback: {name}= must be one of {names}, given a function")
            setattr(self, name, hook)


def _epoch_batches(batches: Any, epoch: int, epochs: int) -> Iterable[Mapping[str, Any]]:
    if callable(batches):
        found = batches(epoch)
        if not isinstance(found, Iterable) or isinstance(found, (str, bytes, Mapping)):
            raise ArgumentError(
                f"fit: the batches function returned {type(found).__name__} for epoch {epoch}; it must return an "
                "iterable of data dicts"
            )
        return found
    if isinstance(batches, (Sequence, Mapping)) and not isinstance(batches, (str, bytes)):
        if isinstance(batches, Mapping):
            raise ArgumentError(
                "fit(batches=...): expected a list of data dicts (or a function epoch -> batches), got one dict; wrap "
                "it: [batch]"
            )
        return batches
    if epochs > 1:
        raise ArgumentError(
            f"fit(batches=...) with epochs={epochs}: {type(batches).__name__} can be iterated only once; pass a list, "
            "or a function epoch -> iterable of batches"
        )
    if not isinstance(batches, Iterable):
        raise ArgumentError(
            "fit(batches=...): expected a list of data dicts, an iterable, or a function epoch -> batches, got "
            f"{type(batches).__name__}"
        )
    return batches


def _scalars(outputs: Mapping[str, Any], keys: Sequence[str], to_numpy: Callable[[Any], Any]) -> dict[str, float]:
    """Each output as one number: a scalar as it is, a per-sample metric averaged."""
    return {key: float(np.mean(np.asarray(to_numpy(outputs[key]), dtype=np.float64))) for key in keys}


def _metric_keys(pm: Any) -> list[str]:
    keys = list(getattr(pm.model, "metric_keys", []) or [])
    return [k for k in keys if k in pm.output_keys]


def _samples(batch: Mapping[str, Any]) -> int:
    for value in batch.values():
        shape = getattr(value, "shape", None)
        if shape:
            return int(shape[0])
    return 1


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The newest complete ``step-<n>.safetensors`` :func:`fit` wrote in ``directory`` (with its manifest
    and history; one whose saving was interrupted is passed over), ``None`` if there is none."""
    directory = Path(directory)
    if not directory.is_dir():
        return None
    found = [
        (int(m.group(1)), p)
        for p in directory.iterdir()
        if (m := _CHECKPOINT.match(p.name))
        and manifest_path(p).exists()
        and p.with_name(p.name.replace(".safetensors", ".history.json")).exists()
    ]
    return max(found)[1] if found else None


def _evaluate(
    pm: Any, state: TrainState, batches: Iterable[Mapping[str, Any]], keys: Sequence[str]
) -> dict[str, float]:
    totals = dict.fromkeys(keys, 0.0)
    count = 0
    for batch in batches:
        outputs = pm.evaluate(state.params, batch)
        for key, value in _scalars(outputs, keys, pm.backend.to_numpy).items():
            totals[key] += value
        count += 1
    if count == 0:
        raise ArgumentError("fit(eval_batches=...): no batches to evaluate")
    return {f"eval_{'loss' if key == pm.loss_key else key}": total / count for key, total in totals.items()}


def fit(
    pm: Any,
    state: TrainState,
    batches: Any,
    epochs: int = 1,
    eval_batches: Any = None,
    callbacks: Sequence[Callback] = (),
    checkpoint_dir: str | Path | None = None,
    resume: bool = False,
    log_every: int = 10,
    *,
    verbose: bool | None = None,
) -> tuple[TrainState, History]:
    """Train ``pm`` (compiled with ``optimizer=``) from ``state`` over ``batches`` for ``epochs``.

    Args:
        batches: a list of data dicts (each a ``train_step`` data argument), a function ``epoch -> iterable``
            of them (a fresh shuffle each epoch), or a one-shot iterable when ``epochs == 1``.
        eval_batches: data evaluated (without updates) at the end of each epoch: ``eval_loss`` and
            ``eval_<metric>`` in the epoch logs. A list or a function ``epoch -> iterable``.
        callbacks: :class:`Callback` objects (:class:`EarlyStopping`, :class:`LambdaCallback`, your own).
        checkpoint_dir: save ``step-<n>.safetensors`` (:func:`~mithril.save_state`) there after every epoch.
        resume: continue from the newest checkpoint in ``checkpoint_dir``: the steps it holds are skipped
            (the same batches in the same order must be given), so the result equals an uninterrupted run.
        log_every: steps between updates of the progress line (loss over those steps, samples per second).
        verbose: show progress (``None``: only on a terminal, see :mod:`mithril.progress`).

    Returns:
        ``(state, history)``: the final state and a :class:`History`.
    """
    epochs, log_every, callbacks, directory = _checked_arguments(
        pm, state, epochs, log_every, resume, callbacks, checkpoint_dir
    )
    history, done = History(), 0  # done: batches of this run already trained (the checkpoint's position)
    if resume and directory is not None and (latest := latest_checkpoint(directory)) is not None:
        history, done = _load_history(latest)
        state = load_state(pm, latest)
    total = len(batches) * epochs if isinstance(batches, Sequence) else None
    for callback in callbacks:
        callback.on_train_begin(state)
    for epoch, logs in enumerate(history.epochs):  # resumed: callbacks see the finished epochs again (EarlyStopping)
        for callback in callbacks:
            callback.on_epoch_end(epoch, logs)
    if any(c.stop for c in callbacks):
        epochs = 0  # the run had stopped before it was interrupted
    title = f"training {type(pm.model).__name__} on {type(pm.backend).__name__}"
    with task(title, total=total, unit="step", verbose=verbose, delay=0.0 if verbose else None) as advance:
        advance(min(done, total or done))
        run = _Run(pm, state, callbacks, history, done, _ProgressWindow(advance, log_every))
        for epoch in range(epochs):
            epoch_logs = run.train_epoch(batches, epoch, epochs)
            if epoch_logs is None:
                continue  # an epoch wholly inside the checkpoint: its logs were saved with it
            if eval_batches is not None:
                eval_data = _epoch_batches(eval_batches, epoch, epochs)
                epoch_logs.update(_evaluate(pm, run.state, eval_data, [run.loss_key, *run.metrics]))
            history.epochs.append(epoch_logs)
            if directory is not None:
                _save_checkpoint(directory, run.state, history, run.step)
            for callback in callbacks:
                callback.on_epoch_end(epoch, epoch_logs)
            if run.stopped or any(c.stop for c in callbacks):
                break
    for callback in callbacks:
        callback.on_train_end(run.state, history)
    return run.state, history


def _checked_arguments(
    pm: Any, state: Any, epochs: Any, log_every: Any, resume: Any, callbacks: Any, checkpoint_dir: Any
) -> tuple[int, int, list[Callback], Path | None]:
    """``fit``'s arguments checked: ``(epochs, log_every, callbacks, checkpoint folder or None)``."""
    if getattr(pm, "_training", None) is None:
        raise ArgumentError(
            "fit: the model was compiled without optimizer=...; compile it with ml.compile(..., "
            "optimizer=optim.AdamW(...))"
        )
    if not isinstance(state, TrainState):
        raise ArgumentError(
            f"fit(state=...): expected an ml.TrainState (pm.init_state(params)), got {type(state).__name__}"
        )
    epochs = int(validation.positive_int("fit", "epochs", epochs))
    log_every = int(validation.positive_int("fit", "log_every", log_every))
    validation.boolean("fit", "resume", resume)
    if callbacks is None:
        callbacks = ()
    if not isinstance(callbacks, Iterable):
        raise ArgumentError(
            f"fit(callbacks=...): expected a list of mithril.training.Callback objects, got {type(callbacks).__name__}"
        )
    callbacks = list(callbacks)
    for callback in callbacks:
        if not isinstance(callback, Callback):
            raise ArgumentError(f"fit(callbacks=...): expected mithril.training.Callback objects, got {callback!r}")
    if checkpoint_dir is not None and not isinstance(checkpoint_dir, (str, os.PathLike)):
        raise ArgumentError(
            "fit(checkpoint_dir=...): expected a folder path (str or os.PathLike), got "
            f"{type(checkpoint_dir).__name__}"
        )
    directory = None if checkpoint_dir is None else Path(checkpoint_dir)
    if resume and directory is None:
        raise ArgumentError("fit(resume=True) needs checkpoint_dir=... (where the run saved its checkpoints)")
    return epochs, log_every, callbacks, directory


class _ProgressWindow:
    """The progress line: the mean loss, and samples per second, over the last ``log_every`` steps."""

    def __init__(self, advance: Callable[..., Any], log_every: int) -> None:
        self.advance, self.log_every = advance, log_every
        self.losses: list[float] = []
        self.samples, self.started = 0, time.perf_counter()

    def add(self, loss: float, samples: int) -> None:
        self.losses.append(loss)
        self.samples += samples

    def report_when_full(self, label: str) -> None:
        """Advance the line by the window's steps once it holds ``log_every`` of them."""
        if len(self.losses) < self.log_every:
            return
        rate = self.samples / max(time.perf_counter() - self.started, 1e-9)
        mean = sum(self.losses) / len(self.losses)
        self.advance(len(self.losses), f"{label}, loss {mean:.4g}, {rate:,.0f} samples/s")
        self.losses, self.samples, self.started = [], 0, time.perf_counter()

    def flush(self, label: str) -> None:
        """At an epoch's end: advance by the steps not reported yet."""
        if self.losses:
            self.advance(len(self.losses), f"{label}, loss {sum(self.losses) / len(self.losses):.4g}")
            self.losses = []


class _Run:
    """One :func:`fit` call's steps: the state they advance, the history and logs they record, and whether a
    callback or a diverged loss stopped them."""

    def __init__(
        self,
        pm: Any,
        state: TrainState,
        callbacks: list[Callback],
        history: History,
        done: int,
        progress: _ProgressWindow,
    ) -> None:
        self.pm, self.state, self.callbacks, self.history = pm, state, callbacks, history
        self.done, self.progress = done, progress
        self.metrics = _metric_keys(pm)
        self.loss_key = pm.loss_key
        self.step = 0  # batches seen by this run, those inside a resumed checkpoint included
        self.stopped = False

    def train_epoch(self, batches: Any, epoch: int, epochs: int) -> dict[str, float] | None:
        """Train one epoch; its logs (loss and metrics averaged over its steps), or ``None`` when every step
        of it is inside the checkpoint the run resumed from."""
        sums = dict.fromkeys(["loss", *self.metrics], 0.0)
        count = 0
        label = f"epoch {epoch + 1}/{epochs}"
        for batch in _epoch_batches(batches, epoch, epochs):
            self.step += 1
            if self.step <= self.done:
                continue  # resumed: this step is in the checkpoint
            logs = self._train_step(batch, epoch)
            for key, value in logs.items():
                sums[key] = sums.get(key, 0.0) + value
            count += 1
            self.progress.add(logs["loss"], _samples(batch))
            for callback in self.callbacks:
                callback.on_step_end(self.step, logs)
            self.progress.report_when_full(label)
            if any(c.stop for c in self.callbacks) or self.history.diverged_at is not None:
                self.stopped = True
                break
        self.progress.flush(label)
        if count == 0 and self.step <= self.done:
            return None
        return {key: value / max(count, 1) for key, value in sums.items()}

    def _train_step(self, batch: Mapping[str, Any], epoch: int) -> dict[str, float]:
        """One ``train_step``; its logs (``loss`` and the metrics of the batch), recorded in the history."""
        self.state, outputs = self.pm.train_step(self.state, batch)
        values = _scalars(outputs, [self.loss_key, *self.metrics], self.pm.backend.to_numpy)
        logs = {"loss": values[self.loss_key], **{key: values[key] for key in self.metrics}}
        self.history.loss.append(logs["loss"])
        if not math.isfinite(logs["loss"]):
            self.history.diverged_at = self.step
            warnings.warn(
                f"fit: the loss is {logs['loss']} at step {self.step} (epoch {epoch + 1}); training stopped. Lower "
                "the learning rate or clip the gradients (clip_norm=)",
                RuntimeWarning,
                stacklevel=4,  # the caller of fit
            )
        return logs


def _save_checkpoint(directory: Path, state: TrainState, history: History, batches: int) -> None:
    """``step-<batches>.safetensors`` (+ manifest), then ``step-<batches>.history.json``: written last, it
    marks the checkpoint complete (a run killed while saving resumes from the previous one)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CheckpointError(f"fit(checkpoint_dir={str(directory)!r}): cannot create the folder: {exc}") from None
    path = directory / f"step-{batches}.safetensors"
    save_state(state, path)
    record = {"loss": history.loss, "epochs": history.epochs, "batches": batches}
    write_file_atomically(
        path.with_name(f"step-{batches}.history.json"),
        json.dumps(record),
        where=f"fit(checkpoint_dir={str(directory)!r})",
    )


def _load_history(checkpoint: Path) -> tuple[History, int]:
    """The history saved with a checkpoint and how many batches the run had trained."""
    path = checkpoint.with_name(checkpoint.name.replace(".safetensors", ".history.json"))
    data = parse_json(path.read_bytes(), path, "training history")
    problem = None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("epochs"), list)
        or not validation.is_int(data.get("batches"))
        or data["batches"] < 0
    ):
        problem = "it needs loss, epochs and batches"
    else:
        try:
            loss = [float(x) for x in data["loss"]]
            epochs = [{str(k): float(v) for k, v in e.items()} for e in data["epochs"]]
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            problem = str(exc)
    if problem is not None:
        raise CheckpointError(f"fit(resume=True): {str(path)!r} is not a training history ({problem})")
    return History(loss, epochs), int(data["batches"])
