"""``mithril demo``: compose the seeds' MLP and CNN, compile them on every installed backend, train the
MLP on a generated classification task, and print a comparison table. The demo fails (``mithril demo`` exits
with status 1) when a backend fails, when training diverges, or when a backend's outputs differ from NumPy's
by more than :data:`DEVIATION_TOLERANCE`.

``mithril demo --plot loss.png`` also draws every backend's loss curve in one matplotlib figure
(:func:`plot_losses`; matplotlib comes with ``pip install "mithril-core[viz]"``).

Example:
    $ mithril demo --steps 300
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import optim, validation
from .compiler.compile import compile as compile_model
from .errors import ArgumentError, BackendNotAvailableError, MithrilError
from .lazy_plugins import available_backends, backend_class, registry
from .models import MLP, Conv2d, CrossEntropy, Flatten, IOKey, Linear, MaxPool2D, Model, Relu
from .primitives.registry import resolve_target
from .training import LambdaCallback, fit
from .types import Dtype

__all__ = [
    "DEVIATION_TOLERANCE", "DemoFailed", "DemoRow", "build_cnn", "build_mlp_with_loss", "classification_data",
    "deviation_failure", "disagreements", "plot_losses", "print_table", "run_demo",
]  # fmt: skip

DEVIATION_TOLERANCE = 1e-3
"""Largest ``max |output - NumPy's output|`` the demo accepts from another backend (float32: the MLP's logits
after 300 training steps differ by about 3e-6 on every backend, the CNN's outputs by about 5e-7)."""


def classification_data(
    n: int = 512, features: int = 20, classes: int = 3, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian blobs: ``classes`` clusters in ``features`` dims, labels as int64."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0.0, 2.0, (classes, features))
    labels = rng.integers(0, classes, n)
    points = centers[labels] + rng.normal(0.0, 1.0, (n, features))
    return points, labels.astype(np.int64)


def build_mlp_with_loss(features: int, classes: int) -> Any:
    """The seeds' MLP (``MLP(input_size, hidden_sizes, output_size)``) with a mean cross-entropy loss."""
    model = Model()
    model |= MLP(input_size=features, hidden_sizes=[64, 32], output_size=classes)(input="input", output=IOKey("logits"))
    model |= CrossEntropy(reduction="mean")(input="logits", target="target", output=IOKey("loss"))
    return model


def build_cnn(image_size: int | None = None, channels: tuple[int, int] = (16, 32), classes: int = 10) -> Any:
    """The seeds' CNN: two Conv2d+ReLU+MaxPool blocks (``channels`` out), Flatten, Linear(``classes``) on
    3-channel images (3x32x32 in the seeds).

    ``image_size`` fixes the last layer's input features (``channels[1] * (image_size // 4) ** 2``, as the
    seed's ``input_size``); without it they follow the compiled shapes.

    >>> build_cnn(image_size=32).input_keys[:1]
    ['input']
    """
    model = Model()
    for c_in, c_out in zip((3, channels[0]), channels, strict=True):
        model += Conv2d(in_channels=c_in, out_channels=c_out, kernel_size=3, padding="same")
        model += Relu()
        model += MaxPool2D(kernel_size=2, stride=2)
    model += Flatten()
    model += Linear(dimension=classes, in_features=None if image_size is None else channels[1] * (image_size // 4) ** 2)
    return model


@dataclass
class DemoRow:
    """One backend's line of the demo table, and its loss after every training step."""

    backend: str
    compile_ms: float
    step_ms: float
    final_loss: float
    max_deviation: float
    cnn_deviation: float
    losses: list[float] = field(default_factory=list)


def _train(
    backend: Any, steps: int, lr: float, data: tuple[np.ndarray, np.ndarray], progress: Callable[[str], None]
) -> tuple[DemoRow, np.ndarray, np.ndarray]:
    points, labels = data
    started = time.perf_counter()
    model = build_mlp_with_loss(points.shape[1], int(labels.max()) + 1)
    pm = compile_model(
        model,
        backend,
        shapes={"input": list(points.shape)},
        data_keys={"input", "target"},
        optimizer=optim.SGD(lr=lr),
        loss="loss",
    )
    cnn = compile_model(build_cnn(), backend, shapes={"input": [4, 3, 32, 32]}, inference=True)
    compile_ms = (time.perf_counter() - started) * 1e3
    params = pm.randomize_params(seed=0)
    batch = {"input": backend.array(points), "target": backend.array(labels, "int")}
    stamps = [time.perf_counter()]

    def report(step: int, logs: Mapping[str, float]) -> None:
        stamps.append(time.perf_counter())
        if (step - 1) % max(steps // 4, 1) == 0:
            progress(f"  {type(backend).__name__}: step {step - 1:4d} loss {logs['loss']:.4f}")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a diverged run is a row of the table, reported below
        # forward, backward and the SGD update in one compiled call per step; fit shows its progress bar
        state, history = fit(
            pm,
            pm.init_state(params),
            [batch] * steps,
            callbacks=[LambdaCallback(on_step_end=report)],
            log_every=max(1, steps // 100),
        )
    trained, losses = state.params, history.loss
    times = list(np.diff(stamps))
    loss = losses[-1] if losses else float("nan")
    logits = backend.to_numpy(pm.evaluate(trained, batch)["logits"])
    images = np.random.default_rng(1).normal(size=(4, 3, 32, 32))
    cnn_out = backend.to_numpy(cnn.evaluate(cnn.randomize_params(seed=0), {"input": backend.array(images)})["output"])
    row = DemoRow(type(backend).__name__, compile_ms, float(np.median(times)) * 1e3, loss, 0.0, 0.0, losses)
    return row, logits, cnn_out


def deviation_failure(backend: str, what: str, deviation: float, tolerance: float = DEVIATION_TOLERANCE) -> str | None:
    """The failure line of ``backend`` when its ``what`` differ from NumPy's by more than ``tolerance`` (or
    by NaN), else ``None``.

    >>> deviation_failure("TorchBackend", "MLP logits", 0.5)
    "TorchBackend: MLP logits differ from NumPy's by 5.00e-01, more than the tolerance 1e-03"
    """
    if deviation <= tolerance:
        return None
    return f"{backend}: {what} differ from NumPy's by {deviation:.2e}, more than the tolerance {tolerance:.0e}"


def print_table(print_fn: Callable[[str], None], header: str, lines: Iterable[str], failures: Iterable[str]) -> None:
    """A demo's results: ``header`` over a rule, a line per backend, then a ``FAILED`` line per failure."""
    print_fn(header)
    print_fn("-" * len(header))
    for line in lines:
        print_fn(line)
    for failure in failures:
        print_fn(f"{'FAILED':<16}{failure}")


def disagreements(rows: Sequence[DemoRow], tolerance: float = DEVIATION_TOLERANCE) -> list[str]:
    """The failures of the demo table: a row whose training diverged (a final loss that is not finite: its
    logits are then not compared), and a row whose MLP logits or CNN outputs differ from NumPy's by more than
    ``tolerance``."""
    failures = []
    for row in rows:
        compared = [("CNN outputs", row.cnn_deviation)]
        if math.isfinite(row.final_loss):
            compared.insert(0, ("MLP logits", row.max_deviation))
        else:
            failures.append(f"{row.backend}: training diverged (final loss {row.final_loss}); try a smaller --lr")
        for what, deviation in compared:
            failure = deviation_failure(row.backend, what, deviation, tolerance)
            if failure is not None:
                failures.append(failure)
    return failures


def _check_options(steps: Any, lr: Any) -> tuple[int, float]:
    steps = validation.positive_int("run_demo", "steps", steps)
    return steps, validation.positive_finite("run_demo", "lr", lr)


def run_demo(
    steps: int = 300, lr: float = 0.1, print_fn: Callable[[str], None] = print, plot: str | Path | None = None
) -> list[DemoRow]:
    """Train on every installed backend and print the table; returns its rows. With ``plot``, the loss
    curves of every backend are also written there (:func:`plot_losses`).

    Raises:
        ArgumentError: ``steps`` is not a positive int or ``lr`` not a finite number > 0 (before any training).
        DemoFailed: a backend failed, training diverged, or a backend disagrees with NumPy
            (:func:`disagreements`); the table was printed first.
    """
    steps, lr = _check_options(steps, lr)
    if plot is not None:
        _pyplot("mithril demo --plot")  # refuse before training when matplotlib is missing

    data = classification_data()
    names = [n for n in available_backends() if n != "*"]
    if "numpy" not in names:
        hint = 'pip install "mithril-core[numpy]"'
        raise BackendNotAvailableError(f"mithril demo compares against the NumPy backend: {hint}")
    names.remove("numpy")
    rows: list[DemoRow] = []
    failures: list[str] = []
    reference: tuple[np.ndarray, np.ndarray] | None = None
    for name in ["numpy", *names]:
        try:
            backend = backend_class(name)(dtype=Dtype.float32, seed=0)
        except Exception as exc:  # a backend that cannot run here is reported, not fatal
            print_fn(f"  skipping {name}: {type(exc).__name__}: {exc}")
            continue
        print_fn(f"training on {type(backend).__name__} for {steps} steps...")
        try:
            row, logits, cnn_out = _train(backend, steps, lr, data, print_fn)
        except Exception as exc:  # one broken backend must not hide the others' results
            failures.append(f"{type(backend).__name__}: {type(exc).__name__}: {exc}")
            print_fn(f"  FAILED {failures[-1]}")
            continue
        if reference is None:
            reference = (logits, cnn_out)
        row.max_deviation = float(np.abs(logits - reference[0]).max())
        row.cnn_deviation = float(np.abs(cnn_out - reference[1]).max())
        rows.append(row)
    header = (
        f"{'backend':<16}{'compile ms':>12}{'step ms':>10}{'final loss':>12}{'max dev (MLP)':>15}{'max dev (CNN)':>15}"
    )
    failures += disagreements(rows)
    print_fn("")
    lines = [
        f"{r.backend:<16}{r.compile_ms:>12.1f}{r.step_ms:>10.3f}"
        f"{r.final_loss:>12.4f}{r.max_deviation:>15.2e}{r.cnn_deviation:>15.2e}"
        for r in rows
    ]
    print_table(print_fn, header, lines, failures)
    if plot is not None and rows:
        plot_losses(rows, plot)
        print_fn(f"loss curves of {len(rows)} backends written to {plot}")
    failures += _run_sections(print_fn)
    if failures:
        raise DemoFailed(failures)
    return rows


def _pyplot(where: str) -> Any:
    try:  # matplotlib is optional (the viz extra): imported only when a plot is asked for
        import matplotlib

        matplotlib.use("Agg")  # files only: no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        raise ArgumentError(
            f'{where} needs matplotlib: pip install "mithril-core[viz]" (or pip install matplotlib)'
        ) from None
    return plt


def plot_losses(rows: Sequence[DemoRow], path: str | Path) -> Any:
    """Draw each row's loss per training step in one figure and save it to ``path`` (PNG, SVG or PDF by
    the suffix); returns the matplotlib figure.

    >>> plot_losses(run_demo(steps=20), "loss.png")   # doctest: +SKIP
    """
    plt = _pyplot("plot_losses")
    figure, axes = plt.subplots(figsize=(7, 4))
    for row in rows:
        axes.plot(range(1, len(row.losses) + 1), row.losses, label=row.backend, linewidth=1.5, alpha=0.8)
    axes.set_xlabel("training step")
    axes.set_ylabel("cross-entropy loss")
    axes.set_title("The seeds' MLP trained on every backend")
    axes.legend()
    figure.tight_layout()
    try:
        figure.savefig(path)
    except (OSError, ValueError) as exc:
        plt.close(figure)
        raise ArgumentError(f"plot_losses: cannot write {str(path)!r}: {exc}") from None
    plt.close(figure)
    return figure


def _run_sections(print_fn: Callable[[str], None]) -> list[str]:
    """Run the demo sections plugins registered (``mithril_register_demos``); returns their failures."""
    failures: list[str] = []
    for name, target in registry().demos.items():
        print_fn("")
        try:
            resolve_target(target)(print_fn)
        except DemoFailed as exc:
            failures.extend(f"{name}: {item}" for item in exc.args[0])
        except Exception as exc:  # a broken section is reported, not fatal to the others
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
            print_fn(f"{'FAILED':<16}{failures[-1]}")
    return failures


class DemoFailed(MithrilError, RuntimeError):
    """One or more backends failed to compile or train in the demo (the table was still printed)."""
