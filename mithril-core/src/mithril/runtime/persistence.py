"""Persistence and export of a compiled model: its current parameters (drawn, saved to and loaded from
``.safetensors``/``.npz`` files, never pickle), the standalone program of a native backend, and the JIT's
lowered program.

Example:
    >>> import mithril as ml
    >>> from mithril.models import Linear
    >>> pm = ml.compile(Linear(2), ml.NumpyBackend(), shapes={"input": [1, 3]}, jit=False)
    >>> path = pm.save_params("params.safetensors")                   # doctest: +SKIP
    >>> sorted(pm.load_params(path))                                  # doctest: +SKIP
    ['bias', 'weight']
"""

from __future__ import annotations

import os
import warnings
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .. import initializers, validation
from ..errors import ArgumentError, CheckpointError, MithrilError, ModelKeyError, ShapeError, UnsupportedPrimitiveError
from ..lazy_numpy import np
from ..serialization.files import check_output_directory, write_file_atomically
from ..serialization.names import match_separators
from ..serialization.safetensors import SafetensorsFile, save_safetensors
from .input_checks import InputChecks
from .records import ProgramSignature

__all__ = ["PARAM_FILE_SUFFIXES", "ParameterStore", "export_program", "lower", "lowered_text"]

PARAM_FILE_SUFFIXES = (".safetensors", ".npz")


class ParameterStore:
    """A compiled model's current parameters and buffers: drawn by their initialisers, saved, loaded."""

    def __init__(
        self,
        backend: Any,
        signature: ProgramSignature,
        checks: InputChecks,
        place: Callable[[Mapping[str, Any]], dict[str, Any]],
    ) -> None:
        self.backend = backend
        self.checks = checks
        self.current: dict[str, Any] | None = None
        self._values = {**signature.params, **signature.buffers}
        self._fan_in = dict(signature.fan_in)
        self._place = place

    def randomize(self, seed: int | None = None) -> dict[str, Any]:
        """New parameters, each drawn as its block declares (see ``PhysicalModel.randomize_params``)."""
        seed = validation.positive_int("randomize_params", "seed", seed, optional=True, minimum=0)
        rng = np.random.default_rng(self.backend.seed if seed is None else seed)
        params = {}
        for name, value in self._values.items():
            shape = value.shape.static()
            if shape is None:
                raise ShapeError(
                    f"randomize_params: the shape of parameter {name!r} is {value.shape!r}, not fully known; "
                    "give the input shapes to ml.compile(shapes=...)"
                )
            params[name] = self.backend.array(initializers.sample(rng, shape, value.init, self._fan_in.get(name)))
        self.current = params = self._place(params)
        return params

    def get(self) -> dict[str, Any]:
        """The current parameters (randomised on first use, or the last ones loaded/randomised)."""
        if self.current is None:
            return self.randomize()
        return dict(self.current)

    def save(self, path: str | Path, params: Mapping[str, Any] | None = None) -> Path:
        """Save ``params`` (default: the current ones) to exactly ``path``, after the checks ``load`` runs."""
        path = param_file(path, "save_params")
        where = f"save_params({path})"
        params = self.get() if params is None else params
        if not isinstance(params, Mapping):
            raise ArgumentError(f"{where}: params must be a dict of name -> array, got {type(params).__name__}")
        self.checks.check_group(params, self.checks.state_keys, "params", where)
        self.checks.check_arrays(params, {}, params_only=True, where=where)
        arrays = {k: np.asarray(self.backend.to_numpy(v), order="C") for k, v in params.items()}
        if not path.parent.is_dir():
            raise CheckpointError(f"{where}: the directory {path.parent} does not exist; create it first")
        if path.suffix == ".safetensors":
            try:
                save_safetensors(path, arrays)
            except CheckpointError as exc:
                raise CheckpointError(f"{where}: {exc}") from None
        else:  # a file object: np.savez appends no ".npz" to the name
            write_file_atomically(path, lambda f: np.savez(f, **arrays), where=where)  # type: ignore[arg-type]
        return path

    def load(self, path: str | Path, *, strict: bool = True) -> dict[str, Any]:
        """Load the parameters :meth:`save` wrote; they become the current ones (see
        ``PhysicalModel.load_params``)."""
        path = param_file(path, "load_params")
        arrays = _read_arrays(path)
        state_keys = self.checks.state_keys
        # long names join block paths with "."; files spelling them with "_" load too (mithril.serialization.names)
        params = {k: self.backend.array(v) for k, v in match_separators(arrays, state_keys).items()}
        if not strict and params.keys() != state_keys:
            missing, unexpected = sorted(state_keys - set(params)), sorted(set(params) - state_keys)
            warnings.warn(f"load_params({path}): kept current values for {missing}; ignored {unexpected}", stacklevel=3)
            current = self.get()
            params = {k: params[k] if k in params else current[k] for k in state_keys}
        self.checks.check_group(params, state_keys, "params", f"load_params({path})")
        self.checks.check_arrays(params, {}, params_only=True, where=f"load_params({path})")
        self.current = params = self._place(params)
        return params


def param_file(path: str | Path, where: str) -> Path:
    """``path`` as a :class:`~pathlib.Path` naming a parameter file (``.safetensors`` or ``.npz``)."""
    if not isinstance(path, (str, os.PathLike)):
        raise ArgumentError(
            f"{where}: path must be a str or path ending in .safetensors or .npz, got {path!r} ({type(path).__name__})"
        )
    path = Path(path)
    if path.suffix not in PARAM_FILE_SUFFIXES:
        raise ArgumentError(f"{where}: {path} must end in .safetensors or .npz (the format is chosen by the suffix)")
    return path


def _read_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array of a parameter file; a missing or broken file is a :class:`CheckpointError` naming it."""
    if not path.is_file():
        what = "is a directory, not a file" if path.is_dir() else "does not exist"
        raise CheckpointError(f"load_params: {path} {what}")
    if path.suffix == ".safetensors":
        file = SafetensorsFile(path)
        return {k: file.read(k) for k in file.keys()}
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {k: archive[k] for k in archive.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise CheckpointError(
            f"load_params: {path} is not a valid .npz file ({type(exc).__name__}: {exc})"
        ) from None


def export_program(
    pm: Any,
    store: ParameterStore,
    directory: str | Path,
    params: Mapping[str, Any] | None,
    *,
    randomize: bool,
    seed: int | None,
    overwrite: bool,
) -> Any:
    """Write ``pm``'s standalone program (see ``PhysicalModel.export``) with the program's exporter."""
    where = f"pm.export({str(directory)!r})"
    exporter = getattr(pm.program, "export", None)
    if exporter is None:
        raise UnsupportedPrimitiveError(
            f"{type(pm.backend).__name__} cannot export a standalone program; compile with ml.CBackend() to export C"
        )
    params = validation.mapping(where, "params", params, what="a dict of name -> array")
    randomize = validation.boolean(where, "randomize", randomize)
    overwrite = validation.boolean(where, "overwrite", overwrite)
    seed = validation.positive_int(where, "seed", seed, optional=True, minimum=0)
    if params is not None and randomize:
        raise ArgumentError(f"{where}: give either params=... or randomize=True, not both")
    if params is None and not randomize:
        raise ArgumentError(
            f"{where}: expected the parameters to write, got none. Pass params=... (e.g. your trained "
            "parameters, or pm.get_parameters()), or randomize=True to write random ones"
        )
    if seed is not None and not randomize:
        raise ArgumentError(f"{where}: seed={seed!r} is only used with randomize=True")
    directory = check_output_directory(directory, overwrite, where)
    if params is None:
        current = store.current
        try:
            params = store.randomize(seed)
        finally:
            store.current = current
        source = f"random (randomize_params(seed={seed!r}))"
    else:
        _check_exact_state(params, store.checks.state_keys, where)
        source = "given"
    arrays = {k: np.asarray(pm.backend.to_numpy(v)) for k, v in params.items()}
    return exporter(directory, arrays, pm, overwrite=overwrite, params_source=source)


def _check_exact_state(params: Mapping[str, Any], state_keys: frozenset[str], where: str) -> None:
    missing, unknown = sorted(state_keys - set(params)), sorted(set(params) - state_keys)
    if missing or unknown:
        parts = ([f"missing {missing}"] if missing else []) + ([f"unknown {unknown}"] if unknown else [])
        raise ModelKeyError(
            f"{where}: params {'; '.join(parts)}; expected exactly the parameters and buffers {sorted(state_keys)}"
        )


def lower(
    backend: Any,
    compiled: Mapping[str, Any],
    params: Mapping[str, Any],
    data: Mapping[str, Any],
    output_gradients: Mapping[str, Any] | None = None,
) -> Any:
    """The JIT's lowered program of ``compiled["forward"]`` (or ``["gradients"]`` with ``output_gradients``)."""
    which = "forward" if output_gradients is None else "gradients"
    lowering = getattr(compiled[which], "lower", None)
    if lowering is None:
        raise MithrilError(
            f"PhysicalModel.lower: the {which} function of this model on {type(backend).__name__} has no lowered "
            "form (JAX with jit gives one: ml.compile(..., backend=ml.JaxBackend(), jit=True))"
        )
    args = (params, data) if output_gradients is None else (params, data, output_gradients)
    return lowering(*args)


def lowered_text(
    backend: Any, compiled: Mapping[str, Any], params: Mapping[str, Any] | None, data: Mapping[str, Any] | None
) -> str:
    """The forward's lowered (StableHLO) text, for ``params``/``data`` or as kept at the first evaluate."""
    if params is not None and data is not None:
        return str(lower(backend, compiled, params, data).as_text())
    text = getattr(compiled["forward"], "lowered_text", None)
    if text is None:
        raise MithrilError(
            "PhysicalModel.lowered_text(): no text kept yet; compile with jit_options={'xla_computation': True} "
            "and evaluate once, or pass params and data"
        )
    return str(text)
