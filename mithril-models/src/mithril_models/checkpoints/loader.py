"""``load_hf``: checkpoint tensors -> a compiled model's parameters, with one report of every problem.

Example:
    >>> import mithril as ml
    >>> from mithril_models import create_gpt, load_hf
    >>> gpt = create_gpt(bias=True, block_size=8, dims=16, num_heads=2, num_layers=1, vocab_size=32)
    >>> pm = ml.compile(gpt, ml.NumpyBackend(), shapes={"input": [1, 8]}, data_keys={"input"})  # doctest: +SKIP
    >>> params = load_hf(pm, "gpt2/model.safetensors")                                           # doctest: +SKIP
    >>> logits = pm.evaluate(params, {"input": ids})["output"]                                   # doctest: +SKIP
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from mithril.extend import task

from .errors import CheckpointError
from .layout import Layout, Target
from .source import TensorSource, open_checkpoint

__all__ = ["LoadReport", "load_hf"]


@dataclass
class LoadReport:
    """What did not fit when a checkpoint was loaded into a model."""

    source: str
    layout: str
    missing: list[str] = field(default_factory=list)  # "key -> param": model parameters no checkpoint tensor provides
    unexpected: list[str] = field(default_factory=list)  # checkpoint tensors the model has no place for
    mismatched: list[str] = field(default_factory=list)  # "key -> param: checkpoint [..] vs model [..]"
    conflicting: list[str] = field(default_factory=list)  # tied tensors with different values

    def __bool__(self) -> bool:
        return bool(self.missing or self.unexpected or self.mismatched or self.conflicting)

    def __str__(self) -> str:
        lines = [f"checkpoint {self.source} ({self.layout} names) does not fit the model:"]
        for label, items in (
            ("missing (in the model, not in the checkpoint)", self.missing),
            ("unexpected (in the checkpoint, not in the model)", self.unexpected),
            ("shape mismatch", self.mismatched),
            ("tied tensors that differ", self.conflicting),
        ):
            if items:
                lines.append(f"  {label}: {len(items)}")
                lines.extend(f"    {item}" for item in items)
        return "\n".join(lines)


def _family_layout(pm: Any) -> list[Layout]:
    from ..family import find_family_models

    found = list(find_family_models(pm.model)) if pm.model is not None else []
    if len(found) != 1:
        what = "none" if not found else ", ".join(f"{type(m).__name__} at {p or '<root>'}" for p, m in found)
        raise CheckpointError(
            "load_hf needs a compiled model containing exactly one model built by mithril_models "
            f"(resnet18, create_gpt, clip, t5_encode, ...); found {what}"
        )
    prefix, model = found[0]
    return [layout.prefixed(prefix) if prefix else layout for layout in model.checkpoint_layouts()]


def _pick_layout(layouts: list[Layout], keys: list[str]) -> Layout:
    return max(layouts, key=lambda layout: layout.matches(keys))


def _plan(
    layout: Layout, source: TensorSource, by_path: dict[str, str], report: LoadReport
) -> list[tuple[str, list[tuple[str, Target]]]]:
    """For each checkpoint key the model uses: the parameter names and transforms it fills."""
    plan = []
    for key in source.keys():
        targets = layout.entries.get(layout.canonical(key))
        if targets is None:
            if not layout.ignorable(key):
                report.unexpected.append(key)
            continue
        # parameters pruned from this compiled model (discard_keys, constant_keys) need nothing
        used = [(by_path[t.path], t) for t in targets if t.path in by_path]
        if used:
            plan.append((key, used))
    return plan


def load_hf(pm: Any, source: Any, *, strict: bool = True, progress: bool | None = None) -> dict[str, Any]:
    """Parameters (and buffers) for ``pm`` from a checkpoint, as ``pm``'s backend arrays.

    Args:
        pm: a model compiled from a mithril_models builder, on any backend, with either naming mode.
        source: a state dict (PyTorch tensors or NumPy arrays) or a ``.safetensors`` file or
            ``save_pretrained`` directory, with Hugging Face, torchvision/timm (ResNet) or OpenAI CLIP names.
        strict: raise :class:`CheckpointError` listing every missing, unexpected and mis-shaped key; with
            ``False`` load what fits, keep ``pm``'s current values for the rest and warn with the report.
        progress: show a progress bar (``None``: on a terminal, when loading takes over 2 s; see
            :mod:`mithril.progress`).

    Returns:
        ``{name: array}`` for every parameter and buffer of ``pm``, ready for ``pm.evaluate``.
    """
    layouts = _family_layout(pm)
    checkpoint = open_checkpoint(source)
    layout = _pick_layout(layouts, checkpoint.keys())
    report = LoadReport(checkpoint.description, layout.name)
    state_names = [*pm.param_keys, *pm.buffer_keys]
    by_path = {pm.input_paths.get(name, name): name for name in state_names}
    shapes = pm.shapes
    plan = _plan(layout, checkpoint, by_path, report)
    tied = _tied_paths(layout)
    loaded: dict[str, Any] = {}
    misfits: set[str] = set()
    tied_sources: dict[str, str] = {}  # tied parameter -> the checkpoint key that filled it
    total = sum(checkpoint.nbytes(key) for key, _ in plan)
    with task(f"loading {checkpoint.description}", total=total, unit="B", verbose=progress) as advance:
        for key, targets in plan:
            array = checkpoint.read(key)
            for name, target in targets:
                value = target.apply(array)
                expected = tuple(shapes[name] or ())
                if tuple(value.shape) != expected:
                    report.mismatched.append(f"{key} -> {name}: checkpoint {list(value.shape)}, model {list(expected)}")
                    misfits.add(name)
                elif name in tied_sources:  # a second key of a tied tensor: it must hold the same values
                    backend = pm.backend
                    if not np.array_equal(backend.to_numpy(loaded[name]), backend.to_numpy(backend.array(value))):
                        first = tied_sources[name]
                        report.conflicting.append(f"{key} and {first} both fill {name} but hold different values")
                else:
                    if target.path in tied:
                        tied_sources[name] = key
                    loaded[name] = pm.backend.array(value)
            advance(checkpoint.nbytes(key))
    expected_keys = _expected_keys(layout)
    report.missing = [
        _missing(name, expected_keys.get(pm.input_paths.get(name, name), []))
        for name in state_names
        if name not in loaded and name not in misfits
    ]
    if report:
        if strict:
            raise CheckpointError(str(report))
        warnings.warn(str(report), stacklevel=2)
        current = pm.get_parameters()
        for name in state_names:
            loaded.setdefault(name, current[name])
    return {name: loaded[name] for name in state_names}


def _expected_keys(layout: Layout) -> dict[str, list[str]]:
    """Parameter path -> the checkpoint keys that fill it, in the layout's order."""
    keys: dict[str, list[str]] = {}
    for key, targets in layout.entries.items():
        for target in targets:
            keys.setdefault(target.path, []).append(key)
    return keys


def _missing(name: str, keys: list[str]) -> str:
    """A report line for a parameter no checkpoint tensor filled: the key(s) expected and the parameter's name
    in the compiled model (``transformer.h.1.mlp.c_fc.weight -> weight_12``)."""
    if not keys:
        return name
    expected = keys[0] + (f" (or {', '.join(keys[1:])})" if len(keys) > 1 else "")
    return expected if keys == [name] else f"{expected} -> {name}"


def _tied_paths(layout: Layout) -> set[str]:
    """Paths filled by more than one checkpoint key (tied embeddings): their sources must agree."""
    return {path for path, keys in _expected_keys(layout).items() if len(keys) > 1}
