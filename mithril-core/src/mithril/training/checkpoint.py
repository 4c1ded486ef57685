"""Training checkpoints: :func:`save_state` writes a :class:`~mithril.TrainState` as one ``.safetensors``
file (parameters, optimizer state, step) plus a JSON manifest beside it (what each tensor is, the step,
the backend generator's state, the tensor file's size and SHA-256); :func:`load_state` reads them back
for a compiled model, checking every name and shape. Never pickle.

Example:
    >>> ml.save_state(state, "run/step-100.safetensors")          # doctest: +SKIP
    >>> state = ml.load_state(pm, "run/step-100.safetensors")      # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ArgumentError, CheckpointError
from ..lazy_numpy import np
from ..optim.state import TrainState
from ..serialization.files import write_file_atomically
from ..serialization.safetensors import SafetensorsFile, parse_json, save_safetensors

__all__ = ["FORMAT", "load_state", "manifest_path", "save_state"]

FORMAT = "mithril-train-state"
VERSION = 1


def manifest_path(path: str | os.PathLike[str]) -> Path:
    """The manifest beside a state file: ``step-100.safetensors`` -> ``step-100.manifest.json``.

    >>> manifest_path("run/step-100.safetensors").name
    'step-100.manifest.json'
    """
    path = Path(path)
    return path.with_name(path.name[: -len(".safetensors")] + ".manifest.json")


def _state_path(path: Any, where: str) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise ArgumentError(f"{where}: path must be a str or os.PathLike, got {type(path).__name__}")
    result = Path(str(path))
    if result.suffix != ".safetensors":
        raise ArgumentError(f"{where}: the state file must end in .safetensors, got {str(result)!r}")
    return result


def _numpy(value: Any) -> np.ndarray:
    if hasattr(value, "full_tensor"):  # a DTensor placed over a device mesh: the whole array
        value = value.full_tensor()
    if hasattr(value, "detach"):  # torch
        value = value.detach().cpu().numpy()
    return np.array(value)


def save_state(state: TrainState, path: str | os.PathLike[str]) -> Path:
    """Write ``state`` to ``path`` (``.safetensors``) and its manifest (``.manifest.json`` beside it), each
    atomically. Returns ``path``.

    >>> ml.save_state(state, tmp / "state.safetensors")            # doctest: +SKIP
    """
    where = f"save_state({str(path)!r})" if isinstance(path, (str, os.PathLike)) else "save_state"
    path = _state_path(path, where)
    if not isinstance(state, TrainState):
        raise ArgumentError(f"{where}: expected an ml.TrainState, got {type(state).__name__}")
    tensors: dict[str, np.ndarray] = {}
    entries: dict[str, Any] = {"params": {}, "opt_state": {}}
    for i, (name, value) in enumerate(state.params.items()):
        tensors[f"p{i}"] = _numpy(value)
        entries["params"][name] = f"p{i}"
    if state.external is not None:  # a framework's optimizer: its state as arrays plus JSON
        arrays, meta = state.external.to_arrays(state.opt_state)
        tensors.update({f"x.{name}": array for name, array in arrays.items()})
        entries["external"] = {"kind": state.external.kind, "meta": meta, "arrays": sorted(arrays)}
    else:
        for s, (slot, values) in enumerate(state.opt_state.items()):
            entries["opt_state"][slot] = {}
            for i, (name, value) in enumerate(values.items()):
                tensors[f"s{s}.{i}"] = _numpy(value)
                entries["opt_state"][slot][name] = f"s{s}.{i}"
    tensors["step"] = _numpy(state.step)
    save_safetensors(path, tensors, metadata={"format": FORMAT})
    raw = path.read_bytes()
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "tensors": path.name,
        "bytes": len(raw),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "step": state.step_count,
        "rng": state.rng,
        "loss_scale": state.loss_scale,
        **entries,
    }
    write_file_atomically(manifest_path(path), json.dumps(manifest, indent=1), where=where)
    return path


def _manifest(path: Path, where: str) -> dict[str, Any]:
    manifest_file = manifest_path(path)
    try:
        raw = manifest_file.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(
            f"{where}: the manifest {str(manifest_file)!r} is missing (save_state writes it beside the .safetensors "
            "file)"
        ) from None
    except OSError as exc:
        raise CheckpointError(f"{where}: cannot read {str(manifest_file)!r}: {exc}") from None
    manifest = parse_json(raw, manifest_file, "manifest")
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise CheckpointError(f"{where}: {str(manifest_file)!r} is not a {FORMAT} manifest of version {VERSION}")
    for key, kind in (("params", dict), ("opt_state", dict), ("sha256", str), ("bytes", int)):
        if not isinstance(manifest.get(key), kind):
            raise CheckpointError(f"{where}: {str(manifest_file)!r}: {key!r} is missing or not a {kind.__name__}")
    for slot, names in manifest["opt_state"].items():
        if not isinstance(names, dict):
            raise CheckpointError(f"{where}: {str(manifest_file)!r}: optimizer slot {slot!r} is not a dict")
    step = manifest.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < 2**53:
        raise CheckpointError(f"{where}: the manifest's step must be an int >= 0, got {step!r}")
    return manifest


def load_state(pm: Any, path: str | os.PathLike[str]) -> TrainState:
    """Read a state :func:`save_state` wrote, for ``pm`` (compiled with the same model and optimizer): every
    parameter and optimizer slot must be there with the compiled shape; arrays become ``pm.backend``'s.
    The backend generator's state is restored when the file has one. Raises
    :class:`~mithril.errors.CheckpointError` naming what does not match.

    >>> state = ml.load_state(pm, tmp / "state.safetensors")       # doctest: +SKIP
    """
    where = f"load_state({str(path)!r})" if isinstance(path, (str, os.PathLike)) else "load_state"
    path = _state_path(path, where)
    training = getattr(pm, "_training", None)
    if training is None:
        raise ArgumentError(
            f"{where}: the model was compiled without optimizer=...; compile it with the optimizer the state was saved "
            "from"
        )
    manifest = _manifest(path, where)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"{where}: cannot read the state file: {exc}") from None
    if len(raw) != manifest["bytes"] or hashlib.sha256(raw).hexdigest() != manifest["sha256"]:
        raise CheckpointError(
            f"{where}: the state file does not match its manifest (size or SHA-256 differs): it was changed or only "
            "partly written"
        )
    file = SafetensorsFile(path)
    backend = pm.backend
    expected_params = set(pm.param_keys) | set(pm.buffer_keys)
    _same_keys(where, "parameters", set(manifest["params"]), expected_params)
    _same_keys(where, "optimizer slots", set(manifest["opt_state"]), set(training.slots))
    shapes = pm.shapes

    def read(tensor: Any, name: str, what: str) -> Any:
        if not isinstance(tensor, str) or tensor not in file.keys():
            raise CheckpointError(f"{where}: {what} {name!r} names tensor {tensor!r}, which the file does not hold")
        array = file.read(tensor)
        expected = shapes.get(name)
        if expected is not None and (
            len(expected) != array.ndim
            or any(e is not None and e != s for e, s in zip(expected, array.shape, strict=True))
        ):
            raise CheckpointError(
                f"{where}: {what} {name!r} has shape {list(array.shape)} in the file, the model expects {expected}"
            )
        return backend.array(array)

    params = {name: read(manifest["params"][name], name, "parameter") for name in pm.param_keys + pm.buffer_keys}
    step = file.read("step") if "step" in file.keys() else None
    if step is None or step.shape != ():
        raise CheckpointError(f"{where}: the file has no scalar 'step' tensor")
    rng, loss_scale = manifest.get("rng"), _loss_scale(manifest, training)
    if training.external is not None:
        placed = training.place(params)  # the framework optimizer holds the placed arrays themselves
        opt_state = _external_state(where, manifest, file, training, placed)
        _restore_rng(backend, rng)
        return TrainState(
            placed, opt_state, backend.array(step), rng=rng, external=training.external, loss_scale=loss_scale
        )
    opt_state = {}
    for slot in training.slots:
        names = manifest["opt_state"][slot]
        _same_keys(where, f"optimizer slot {slot!r}", set(names), set(training.param_keys))
        opt_state[slot] = {name: read(names[name], name, f"optimizer slot {slot!r} of") for name in training.param_keys}
    _restore_rng(backend, rng)
    state: TrainState = training.placed(
        TrainState(params, opt_state, backend.array(step), rng=rng, loss_scale=loss_scale)
    )
    return state


def _external_state(
    where: str, manifest: Mapping[str, Any], file: SafetensorsFile, training: Any, params: Mapping[str, Any]
) -> Any:
    """A framework optimizer's state from the file, rebuilt on a fresh one for ``params``."""
    external = manifest.get("external")
    kind = training.external.kind
    if (
        not isinstance(external, Mapping)
        or external.get("kind") != kind
        or not isinstance(external.get("arrays"), list)
    ):
        found = external.get("kind") if isinstance(external, Mapping) else "mithril.optim slots"
        raise CheckpointError(
            f"{where}: the state holds {found} optimizer state; the model was compiled with a {kind} optimizer"
        )
    arrays = {}
    for name in external["arrays"]:
        if not isinstance(name, str) or f"x.{name}" not in file.keys():
            raise CheckpointError(f"{where}: the manifest names optimizer array {name!r}, which the file does not hold")
        arrays[name] = file.read(f"x.{name}")
    template = training.external.init({k: params[k] for k in training.param_keys}, training.backend)
    try:
        return training.external.from_arrays(template, arrays, external.get("meta"), where, training.backend)
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RuntimeError) as exc:
        raise CheckpointError(
            f"{where}: the {kind} optimizer state in the file is damaged or does not fit this optimizer "
            f"({type(exc).__name__}: {exc})"
        ) from None


def _loss_scale(manifest: Mapping[str, Any], training: Any) -> Any:
    """fp16-mixed: the saved loss scale (a fresh one when the state was saved without it)."""
    if not training.loss_scaling:
        return None
    saved = manifest.get("loss_scale")
    if saved is None:
        return training.initial_loss_scale()
    scale = saved.get("scale") if isinstance(saved, Mapping) else None
    good = saved.get("good_steps") if isinstance(saved, Mapping) else None
    if (
        isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or not scale > 0
        or isinstance(good, bool) or not isinstance(good, int) or good < 0
    ):  # fmt: skip
        raise CheckpointError(
            f"load_state: the manifest's loss_scale must be a finite scale > 0 and a count >= 0, got {saved!r}"
        )
    return {"scale": float(scale), "good_steps": int(good)}


def _same_keys(where: str, what: str, found: set[str], expected: set[str]) -> None:
    if found != expected:
        missing, unknown = sorted(expected - found), sorted(found - expected)
        raise CheckpointError(
            f"{where}: {what} differ from the compiled model's: missing {missing}, unexpected {unknown}"
        )


def _restore_rng(backend: Any, rng: Any) -> None:
    generator = getattr(backend, "_rng", None)
    if rng is None or not isinstance(generator, np.random.Generator) or not isinstance(rng, Mapping):
        return
    try:
        generator.bit_generator.state = dict(rng)
    except (TypeError, ValueError, KeyError, OverflowError) as exc:
        raise CheckpointError(
            f"load_state: the saved generator state does not fit {type(generator.bit_generator).__name__}: {exc}"
        ) from None
