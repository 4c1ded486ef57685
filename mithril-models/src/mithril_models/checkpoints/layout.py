"""How a checkpoint's tensor names map onto a model's parameters: :class:`Layout` and :class:`Target`.

A family writes one layout per published naming convention (Hugging Face, torchvision, OpenAI, ...),
generated from the model's configuration, so a checkpoint of another size shows up as missing,
unexpected or mis-shaped keys. One checkpoint tensor may feed several parameters (OpenAI's packed
``in_proj_weight`` -> q, k, v) and several checkpoint tensors may name one parameter (tied embeddings);
those must then hold the same values.

Example:
    >>> layout = Layout("example", {"fc.weight": [Target("head.weight", transpose)]})
    >>> layout.entries["fc.weight"][0].path
    'head.weight'
    >>> layout.prefixed("gpt.").entries["fc.weight"][0].path
    'gpt.head.weight'
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

__all__ = ["Layout", "Part", "Target", "merge_layouts", "never", "searching", "take", "task_prefixed", "transpose"]

Transform = Callable[[np.ndarray], np.ndarray]


def transpose(array: np.ndarray) -> np.ndarray:
    """Swap the two axes of a matrix (GPT-2's ``Conv1D`` stores ``[in, out]``; ``Linear`` is ``[out, in]``)."""
    return np.ascontiguousarray(array.T)


class Part:
    """The transform :func:`take` returns: part ``index`` of ``parts`` equal slices along ``axis``, then
    ``then``. ``packing`` (``(index, parts, axis, then)``) lets ``to_checkpoint`` re-pack the parts."""

    def __init__(self, index: int, parts: int, axis: int, then: Transform | None) -> None:
        self.packing: tuple[int, int, int, Transform | None] = (index, parts, axis, then)
        self.__name__ = f"part {index + 1} of {parts} along axis {axis}"

    def __call__(self, array: np.ndarray) -> np.ndarray:
        index, parts, axis, then = self.packing
        size = array.shape[axis] // parts
        piece = np.ascontiguousarray(np.take(array, np.arange(index * size, (index + 1) * size), axis=axis))
        return then(piece) if then is not None else piece


def take(index: int, parts: int, axis: int = 0, then: Transform | None = None) -> Part:
    """Part ``index`` of ``parts`` equal slices along ``axis`` (a packed q/k/v projection), then ``then``."""
    return Part(index, parts, axis, then)


def never(key: str) -> bool:
    """The default :attr:`Layout.ignorable`: no extra checkpoint key is expected."""
    return False


def _identity(key: str) -> str:
    return key


def searching(pattern: str) -> Callable[[str], bool]:
    """A :attr:`Layout.ignorable`: the keys in which the regex ``pattern`` is found (buffers of older files).

    >>> searching(r"(^|\\.)inv_freq$")("layers.0.rotary_emb.inv_freq")
    True
    """
    compiled = re.compile(pattern)

    def ignorable(key: str) -> bool:
        return compiled.search(key) is not None

    return ignorable


def task_prefixed(prefix: str, *heads: str) -> Callable[[str], str]:
    """A :attr:`Layout.canonical` that reads the files of a base model (``GPT2Model``) as the task model's
    (``GPT2LMHeadModel``): a key that starts with neither ``prefix`` nor one of the task's ``heads`` gets ``prefix``.

    >>> task_prefixed("model.", "lm_head.")("layers.0.mlp.up_proj.weight")
    'model.layers.0.mlp.up_proj.weight'
    """

    def canonical(key: str) -> str:
        return key if key.startswith((prefix, *heads)) else f"{prefix}{key}"

    return canonical


@dataclass(frozen=True)
class Target:
    """One model parameter filled from a checkpoint tensor: its logical ``path`` and an optional ``transform``."""

    path: str
    transform: Transform | None = None

    def apply(self, array: np.ndarray) -> np.ndarray:
        return self.transform(array) if self.transform is not None else array


@dataclass(frozen=True)
class Layout:
    """One checkpoint naming convention for one model.

    Attributes:
        name: shown in reports (``"Hugging Face transformers"``).
        entries: checkpoint key -> the parameters it fills.
        ignorable: keys a checkpoint legitimately carries beyond this model (the other half of T5,
            BatchNorm's ``num_batches_tracked``, GPT-2's attention-mask buffers).
        canonical: maps a checkpoint key to the spelling used in ``entries`` (a checkpoint saved from a
            base model lacks the task model's ``transformer.`` prefix).
    """

    name: str
    entries: Mapping[str, Sequence[Target]]
    ignorable: Callable[[str], bool] = never
    canonical: Callable[[str], str] = field(default=_identity)

    def prefixed(self, prefix: str) -> Layout:
        """The same layout for the model placed at ``prefix`` inside a larger one."""
        entries = {key: [replace(t, path=prefix + t.path) for t in targets] for key, targets in self.entries.items()}
        return replace(self, entries=entries)

    def matches(self, keys: Iterable[str]) -> int:
        """How many of ``keys`` this layout knows (the loader picks the layout that knows most)."""
        return sum(1 for key in keys if self.canonical(key) in self.entries)


def merge_layouts(name: str, layouts: Sequence[Layout], extra: Mapping[str, Sequence[Target]] | None = None) -> Layout:
    """One layout from several (a model's towers), plus ``extra`` entries of its own.

    The result ignores what any part ignores, and canonicalises keys with the first part whose
    ``canonical`` changes the key."""
    entries: dict[str, list[Target]] = {}
    for layout in layouts:
        for key, targets in layout.entries.items():
            entries.setdefault(key, []).extend(targets)
    for key, targets in (extra or {}).items():
        entries.setdefault(key, []).extend(targets)

    def ignorable(key: str) -> bool:
        return any(layout.ignorable(key) for layout in layouts)

    def canonical(key: str) -> str:
        for layout in layouts:
            changed = layout.canonical(key)
            if changed != key:
                return changed
        return key

    return Layout(name, entries, ignorable, canonical)
