"""Where checkpoint tensors come from: an in-memory state dict or ``.safetensors`` file(s) on disk.

:func:`open_checkpoint` accepts a mapping of name -> tensor (PyTorch tensors, NumPy/JAX/MLX arrays), a
``.safetensors`` file, or a directory written by ``save_pretrained`` (``model.safetensors`` or a sharded
``model.safetensors.index.json``). Pickle-based files (``.bin``, ``.pt``, ``.pth``, ``.ckpt``) are refused:
loading them can run arbitrary code.

Example:
    >>> import numpy as np
    >>> source = open_checkpoint({"w": np.ones((2, 3), np.float32)})
    >>> source.keys(), source.shape("w")
    (['w'], (2, 3))
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from mithril.errors import ArgumentError
from mithril.extend import SafetensorsFile, read_safetensors_index

from .errors import CheckpointError

__all__ = ["ShardedSource", "StateDictSource", "TensorSource", "open_checkpoint"]

_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")


class TensorSource(Protocol):
    """Read-only access to a checkpoint's tensors, one at a time."""

    description: str

    def keys(self) -> list[str]: ...

    def shape(self, key: str) -> tuple[int, ...]: ...

    def nbytes(self, key: str) -> int: ...

    def read(self, key: str) -> np.ndarray: ...


def to_numpy(value: Any) -> np.ndarray:
    """A NumPy view or copy of a PyTorch tensor (bfloat16 widened to float32) or any array-like."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # torch.Tensor, without importing torch
        value = value.detach().cpu()
        array: np.ndarray  # value is a torch.Tensor, typed Any here
        try:
            array = value.numpy()
        except TypeError:  # bfloat16 and other dtypes NumPy lacks
            array = value.float().numpy()
        return array
    return np.asarray(value)


class StateDictSource:
    """A state dict in memory (``model.state_dict()``, or name -> NumPy array)."""

    def __init__(self, tensors: Mapping[str, Any], description: str = "state dict") -> None:
        self._tensors = tensors
        self.description = description

    def keys(self) -> list[str]:
        return list(self._tensors)

    def shape(self, key: str) -> tuple[int, ...]:
        return tuple(getattr(self._tensors[key], "shape", np.shape(self._tensors[key])))

    def nbytes(self, key: str) -> int:
        value = self._tensors[key]
        return int(getattr(value, "nbytes", 0) or np.asarray(to_numpy(value)).nbytes)

    def read(self, key: str) -> np.ndarray:
        return to_numpy(self._tensors[key])


class ShardedSource:
    """Several ``.safetensors`` shards joined by a ``model.safetensors.index.json`` weight map (checked whole
    when opened: :func:`~mithril.serialization.safetensors.read_safetensors_index`)."""

    def __init__(self, index: Path) -> None:
        self.description = str(index)
        self._where = read_safetensors_index(index)

    def keys(self) -> list[str]:
        return list(self._where)

    def shape(self, key: str) -> tuple[int, ...]:
        return self._where[key].shape(key)

    def nbytes(self, key: str) -> int:
        return self._where[key].nbytes(key)

    def read(self, key: str) -> np.ndarray:
        return self._where[key].read(key)


class _FileSource:
    def __init__(self, file: SafetensorsFile) -> None:
        self._file = file
        self.description = file.path
        self.keys, self.shape, self.nbytes, self.read = file.keys, file.shape, file.nbytes, file.read


def open_checkpoint(source: Any) -> TensorSource:
    """A :class:`TensorSource` for a state dict, a ``.safetensors`` file or a ``save_pretrained`` directory."""
    if isinstance(source, Mapping):
        return StateDictSource(source)
    if not isinstance(source, (str, os.PathLike)):
        raise ArgumentError(
            f"a checkpoint is a state dict or a path to a .safetensors file, got {type(source).__name__}"
        )
    path = Path(source)
    if path.is_dir():
        for name in ("model.safetensors.index.json", "model.safetensors"):
            if (path / name).exists():
                return (
                    ShardedSource(path / name) if name.endswith(".json") else _FileSource(SafetensorsFile(path / name))
                )
        raise CheckpointError(f"{path}: a directory without model.safetensors or model.safetensors.index.json")
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist")
    if path.suffix in _PICKLE_SUFFIXES:
        raise CheckpointError(
            f"{path}: pickle-based checkpoints are refused (loading them can run arbitrary code); convert it once "
            "with safetensors.torch.save_file(torch.load(path, weights_only=True), 'model.safetensors')"
        )
    if path.name.endswith(".index.json"):
        return ShardedSource(path)
    return _FileSource(SafetensorsFile(path))
