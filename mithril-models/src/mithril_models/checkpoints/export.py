"""``to_checkpoint``: a compiled model's parameters under a checkpoint format's names (the inverse of
:func:`~mithril_models.checkpoints.load_hf`), e.g. to write a Hugging Face-named ``.safetensors`` file.

Example:
    >>> from mithril_models.checkpoints import save_safetensors, to_checkpoint
    >>> save_safetensors("gpt2.safetensors", to_checkpoint(pm, params))   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from mithril.errors import ModelKeyError, ShapeError

from .errors import CheckpointError
from .layout import Layout, Part, Target, transpose
from .loader import _family_layout

__all__ = ["to_checkpoint"]


def _inverse(target: Target, value: np.ndarray) -> np.ndarray:
    if target.transform is None:
        return value
    if target.transform is transpose:
        return np.ascontiguousarray(value.T)
    raise CheckpointError(f"to_checkpoint: cannot invert the transform {target.transform.__name__!r} of {target.path}")


def _packed(targets: list[tuple[Target, np.ndarray]]) -> np.ndarray:
    """Re-pack ``take(i, n, axis, then)`` parts (OpenAI's fused q/k/v) into one tensor."""
    parts = []
    for target, value in targets:
        if not isinstance(target.transform, Part):
            raise CheckpointError(f"to_checkpoint: {target.path} is not one part of a packed tensor")
        index, _count, axis, then = target.transform.packing
        if then is not None:
            value = _inverse(Target(target.path, then), value)
        parts.append((index, axis, value))
    parts.sort(key=lambda item: item[0])
    return np.concatenate([value for _, _, value in parts], axis=parts[0][1])


def _checked_arrays(pm: Any, params: Mapping[str, Any], names: list[str]) -> dict[str, np.ndarray]:
    """``names`` of ``params`` as NumPy arrays, after checking that each is there with the model's shape."""
    needed = list(dict.fromkeys(names))
    missing = [name for name in needed if name not in params]
    if missing:
        paths = ", ".join(pm.input_paths.get(name, name) for name in missing)
        raise ModelKeyError(
            f"to_checkpoint: params lacks {missing} ({paths}); pass every parameter and buffer of the model "
            "(e.g. pm.get_parameters())"
        )
    arrays = {}
    for name in needed:
        array = np.asarray(pm.backend.to_numpy(params[name]))
        expected = list(pm.shapes[name] or ())
        if list(array.shape) != expected:
            path = pm.input_paths.get(name, name)
            raise ShapeError(
                f"to_checkpoint: {name!r} ({path}) has shape {list(array.shape)}, the model's is {expected}"
            )
        arrays[name] = array
    return arrays


def to_checkpoint(pm: Any, params: Mapping[str, Any], *, layout: str | None = None) -> dict[str, np.ndarray]:
    """``params`` of ``pm`` as ``{checkpoint key: array}`` in the layout named ``layout`` (default: the
    family's first layout, e.g. Hugging Face names). A tied tensor is written once, under its first key (as
    ``save_pretrained`` does); ``load_hf`` fills every tied parameter from it.

    Every parameter the layout writes must be in ``params`` with the shape ``pm`` gives it: a missing one
    raises :class:`~mithril.errors.ModelKeyError`, a mis-shaped one :class:`~mithril.errors.ShapeError`,
    both naming the parameter and its path in the model."""
    layouts = _family_layout(pm)
    chosen: Layout | None = layouts[0] if layout is None else next((lay for lay in layouts if lay.name == layout), None)
    if chosen is None:
        raise CheckpointError(f"to_checkpoint: no layout named {layout!r}; available: {[lay.name for lay in layouts]}")
    by_path = {pm.input_paths.get(name, name): name for name in [*pm.param_keys, *pm.buffer_keys]}
    arrays = _checked_arrays(
        pm, params, [by_path[t.path] for ts in chosen.entries.values() for t in ts if t.path in by_path]
    )
    result: dict[str, np.ndarray] = {}
    written: set[str] = set()
    for key, targets in chosen.entries.items():
        present = [t for t in targets if t.path in by_path]
        if not present or all(t.path in written for t in present):
            continue
        written.update(t.path for t in present)
        found = [(t, arrays[by_path[t.path]]) for t in present]
        if any(isinstance(t.transform, Part) for t, _ in found):
            result[key] = _packed(found)
        else:  # one parameter, or copies of one tensor
            result[key] = _inverse(*found[0])
    return result
