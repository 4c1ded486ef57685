"""``TorchBackend``: arrays are ``torch.Tensor``; gradients come from ``torch.autograd`` (``vjp``), and
``ml.compile(..., jit=True)`` wraps the generated forward with ``torch.compile``; the default is eager.

Example:
    >>> from mithril.types import Dtype
    >>> backend = TorchBackend(dtype=Dtype.float64, seed=0)
    >>> backend.array([1, 2]).dtype, backend.array([1.5]).dtype
    (torch.int64, torch.float64)
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, cast

import numpy as np
import torch
from mithril.errors import ArgumentError
from mithril.extend import Backend, dtype_table, validation, within
from mithril.types import Dtype, Kind

from . import distributed

__all__ = ["TorchBackend", "available_devices"]


def _parallel_strategy(given: dict[str, Any]) -> str:
    """Why the manual's ``parallel_strategy=``/``devices=`` are refused, and what replaces them."""
    strategy, devices = given.get("parallel_strategy"), given.get("devices")
    count = len(devices) if isinstance(devices, (list, tuple)) else 2
    return (
        f"parallel_strategy={strategy!r}, devices={devices!r}: parallelism is the backend's device_mesh plus "
        f"ml.compile(parallelism=...): run under `torchrun --nproc_per_node {count}` with "
        f"TorchBackend(device_mesh=({count},)) and ml.compile(model, backend, parallelism='data' or 'model')"
    )


class TorchBackend(Backend[torch.Tensor]):
    """Backend computing with PyTorch in float16, bfloat16, float32 (default) or float64.

    Args:
        dtype: the float dtype of parameters and float results.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``; must be available on this machine.
        seed: seed of the backend's own ``torch.Generator`` (random primitives use it; the global torch
            RNG is never touched). ``None`` seeds it from the operating system.
        use_amp: automatic mixed precision: compiled models run their forward (and backward) inside
            ``torch.autocast(device_type, dtype=amp_dtype)``, so matmuls and convolutions compute in
            ``amp_dtype`` while parameters and gradients keep the backend dtype.
        amp_dtype: the autocast dtype (default: float16 on CUDA, bfloat16 elsewhere).
        compile: ``True`` makes ``torch.compile`` the default of ``ml.compile`` on this backend (as
            ``ml.compile(..., jit=True)``); ``False`` (the default) stays eager unless ``jit=True``.

    Example:
        >>> backend = TorchBackend(use_amp=True, compile=False)
        >>> backend.amp_dtype
        torch.bfloat16
    """

    backend_type: ClassVar[str] = "torch"
    supports_autograd: ClassVar[bool] = True
    supported_dtypes: ClassVar[tuple[Dtype, ...]] = (Dtype.float16, Dtype.bfloat16, Dtype.float32, Dtype.float64)
    native_dtypes = dtype_table(torch, supported_dtypes)
    native_dtype = Backend.dtype_from_table
    xp: ClassVar[Any] = torch
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda", "mps")
    refused_options = dict.fromkeys(("parallel_strategy", "devices"), _parallel_strategy)
    shape_option = "dynamic"  # static_shapes is torch.compile(dynamic=not static_shapes)
    jit_by_default: ClassVar[bool] = False  # eager unless ml.compile(jit=True): torch.compile warm-up is seconds on CPU
    updates_in_place: ClassVar[bool] = True  # eager train_step: adam_update with torch.optim's in-place kernels

    @classmethod
    def available_devices(cls) -> tuple[str, ...]:
        """Device types usable on this machine: always ``cpu``, plus ``cuda``/``mps`` when present.

        >>> "cpu" in available_devices()
        True
        """
        devices = ["cpu"]
        if torch.cuda.is_available():
            devices.append("cuda")
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            devices.append("mps")
        return tuple(devices)

    def __init__(
        self,
        dtype: Dtype | str = Dtype.float32,
        device: str = "cpu",
        seed: int | None = None,
        device_mesh: Sequence[int] | None = None,
        use_amp: bool = False,
        amp_dtype: Dtype | str | None = None,
        compile: bool = False,
        **options: Any,
    ) -> None:
        self.check_options(options)
        self._check_device(device)
        self.use_amp = validation.boolean("TorchBackend", "use_amp", use_amp)
        # per backend here (``compile=``): core declares it a ClassVar, the default of every other backend
        self.jit_by_default = validation.boolean("TorchBackend", "compile", compile)  # type: ignore[misc]
        default_amp = torch.float16 if str(device).startswith("cuda") else torch.bfloat16
        self.amp_dtype = self.native_dtypes[Dtype.parse(amp_dtype)] if amp_dtype is not None else default_amp
        if device_mesh is not None:  # a torch.distributed DeviceMesh (see mithril_backend_torch.distributed)
            self.device_mesh = self.mesh_sizes(device_mesh)
            self.mesh = distributed.build_mesh(self.device_mesh, str(device))
        super().__init__(dtype=dtype, device=str(device), seed=seed)

    def place_on_mesh(self, array: Any, spec: Sequence[str | None] | None) -> Any:
        """``array`` as a DTensor over :attr:`mesh` (:mod:`mithril_backend_torch.distributed`)."""
        return distributed.place(self.mesh, self.array(array), spec)

    # -- devices ---------------------------------------------------------------------------------
    def _check_device(self, device: Any) -> None:
        base = str(device).split(":")[0]
        available = self.available_devices()
        if base == "cuda" and "cuda" not in available:
            raise ArgumentError(
                f"TorchBackend(device={str(device)!r}): CUDA is not available on this machine "
                f"(torch {torch.__version__}, torch.cuda.is_available() is False); "
                f"available devices: {', '.join(available)}"
            )

    @property
    def torch_device(self) -> torch.device:
        return torch.device(self.device)

    def set_device(self, device: str) -> None:
        """Move future arrays and the random generator to ``device`` (reseeded with the backend seed).

        Existing tensors are not moved: ``backend.array(t)`` moves one.
        """
        self._check_device(device)
        self.device = str(device)
        self.set_seed(self.seed)

    def enable_deterministic(self) -> None:
        """Ask torch for deterministic kernels (``torch.use_deterministic_algorithms(True)``; on CUDA also
        cuDNN's deterministic mode). This is process-wide, as in torch itself."""
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False

    # -- arrays ----------------------------------------------------------------------------------
    def array(self, data: Any, dtype: Dtype | Kind | None = None) -> torch.Tensor:
        """A tensor on the backend device; floats get the backend dtype, ints int64, bools bool.

        An explicit ``dtype`` (an ``ml.Dtype`` or a kind string) wins. Tensors that already have the
        target dtype and device are returned as they are (no copy).

        >>> TorchBackend().array(3.0).dtype
        torch.float32
        """
        tensor: torch.Tensor | np.ndarray
        if isinstance(data, torch.Tensor):
            tensor, kind = data, "f" if data.is_floating_point() else "c" if data.is_complex() else "i"
            kind = "b" if data.dtype == torch.bool else kind
        else:
            values = np.asarray(data)  # Python floats stay float64 until cast to the target dtype
            kind = values.dtype.kind
            if not values.flags.writeable or not values.flags.c_contiguous:
                values = np.array(values, order="C")  # torch.from_numpy needs its own, writable buffer
            tensor = values
        target = self.target_dtype(kind, dtype, tensor, data)
        return torch.as_tensor(tensor).to(device=self.torch_device, dtype=target)

    def to_numpy(self, array: Any) -> np.ndarray:
        """A NumPy copy of a tensor (bfloat16 becomes float32, which holds it exactly)."""
        if not isinstance(array, torch.Tensor):
            return np.asarray(array)
        array = distributed.full_tensor(array.detach())
        if array.dtype == torch.bfloat16:
            array = array.float()
        return cast(np.ndarray, array.cpu().numpy())

    def is_array(self, value: Any) -> bool:
        """Whether ``value`` is a ``torch.Tensor``."""
        return isinstance(value, torch.Tensor)

    def get_backend_array_type(self) -> type[torch.Tensor]:
        """``torch.Tensor`` (also ``backend.DataType``)."""
        return torch.Tensor

    def creation(self, dtype: Dtype | Kind) -> dict[str, Any]:
        return {"dtype": self.native_dtype(dtype), "device": self.torch_device}

    # -- randomness ------------------------------------------------------------------------------
    def set_seed(self, seed: int | None) -> None:
        """Reseed the backend's own ``torch.Generator`` (``randn``, ``randint``, dropout); ``None`` draws a
        seed from the operating system. The global torch RNG is left alone."""
        super().set_seed(seed)
        self._generator = torch.Generator(device=self.torch_device)
        if self.seed is None:
            self._generator.seed()
        else:
            self._generator.manual_seed(self.seed)

    @property
    def generator(self) -> torch.Generator:
        """The backend's ``torch.Generator`` (on the backend device)."""
        return self._generator

    # random draws here use the torch.Generator; core types ``Backend.rng`` as NumPy's Generator
    rng = generator  # type: ignore[assignment]

    def seeded_source(self, seed: int) -> torch.Generator:
        """A fresh ``torch.Generator`` on the backend device seeded with ``seed`` (``randn(..., key=seed)``)."""
        return torch.Generator(device=self.torch_device).manual_seed(seed)

    def draw(self, distribution: str, shape: tuple[int, ...], dtype: Dtype | Kind | None, key: Any = None) -> Any:
        target = self.native_dtype(dtype)
        work = target if target in (torch.float32, torch.float64) else torch.float32
        sample = torch.randn if distribution == "normal" else torch.rand
        generator = self._generator if key is None else key
        return sample(shape, generator=generator, dtype=work, device=self.torch_device).to(target)

    def draw_integers(self, low: int, high: int, shape: tuple[int, ...], key: Any = None) -> torch.Tensor:
        generator = self._generator if key is None else key
        device = self.torch_device
        return torch.randint(int(low), int(high), shape, generator=generator, dtype=torch.int64, device=device)

    # -- autograd --------------------------------------------------------------------------------
    def vjp(
        self, fn: Callable[[dict[str, Any]], dict[str, Any]], primals: dict[str, Any], cotangents: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Run ``fn(primals)`` under autograd and pull ``cotangents`` back to every primal.

        Returns detached outputs and one gradient per primal (zeros where a primal does not reach a
        differentiated output, or is not a float tensor).
        """
        params = {
            k: v.detach().requires_grad_(v.is_floating_point()) if isinstance(v, torch.Tensor) else v
            for k, v in primals.items()
        }
        with torch.enable_grad(), distributed.replication(self.mesh):
            outputs = fn(params)
            keys = [
                k
                for k in cotangents
                if isinstance(outputs.get(k), torch.Tensor) and outputs[k].requires_grad and cotangents[k] is not None
            ]
            wrt = [k for k, v in params.items() if isinstance(v, torch.Tensor) and v.requires_grad]
            grads: dict[str, torch.Tensor | None] = {}  # none: nothing differentiated, every gradient is zero
            if keys and wrt:
                found = torch.autograd.grad(
                    [outputs[k] for k in keys],
                    [params[k] for k in wrt],
                    [self._cotangent(cotangents[k], outputs[k]) for k in keys],
                    allow_unused=True,
                )
                grads = dict(zip(wrt, found, strict=True))
        gradients = {}
        for name, value in params.items():
            grad = grads.get(name)
            if grad is None:
                gradients[name] = torch.zeros_like(value, requires_grad=False)
            else:
                gradients[name] = grad.detach().to_dense() if grad.is_sparse else grad.detach()
        detached = {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in outputs.items()}
        return detached, gradients

    def _cotangent(self, cotangent: Any, output: torch.Tensor) -> torch.Tensor:
        if not isinstance(cotangent, torch.Tensor):
            cotangent = self.array(cotangent)
        if cotangent.dtype != output.dtype or cotangent.device != output.device:
            cotangent = cotangent.to(device=output.device, dtype=output.dtype)
        if cotangent.shape != output.shape:
            cotangent = cotangent.expand(output.shape)
        if distributed.is_distributed(output) and not distributed.is_distributed(cotangent):
            cotangent = distributed.like(output, cotangent)
        return cast(torch.Tensor, cotangent)

    def prepare_forward(
        self, forward: Callable[..., Any], *, jit: bool, jit_options: dict[str, Any] | None = None
    ) -> Callable[..., Any]:
        """The default, and on a device mesh the tensors the model makes itself (positions, masks,
        constants) join the DTensors as replicated values (:func:`distributed.replication`); with
        ``use_amp`` every call runs under ``torch.autocast``."""
        prepared = super().prepare_forward(forward, jit=jit, jit_options=jit_options)
        if self.use_amp:
            device_type, dtype = self.torch_device.type, self.amp_dtype
            prepared = within(lambda: torch.autocast(device_type=device_type, dtype=dtype), prepared)
        return prepared if self.mesh is None else within(lambda: distributed.replication(self.mesh), prepared)

    def mixed_precision(self, forward: Callable[..., Any], compute: Dtype) -> Callable[..., Any]:
        """``torch.autocast(device, dtype=compute)`` around the forward (PyTorch's AMP: matmuls and convolutions
        in ``compute``, reductions and losses in float32; gradients come back in the parameters' dtype)."""
        device_type, dtype = self.torch_device.type, self.native_dtypes[compute]
        return within(lambda: torch.autocast(device_type=device_type, dtype=dtype), forward)

    def unaliased(self, values: Mapping[str, Any], donated: Iterable[Any]) -> dict[str, Any]:
        """Tensors sharing a storage with a donated one are cloned (compared by storage address)."""
        storages = {t.untyped_storage().data_ptr() for t in donated if isinstance(t, torch.Tensor)}
        return {
            k: v.clone() if isinstance(v, torch.Tensor) and v.untyped_storage().data_ptr() in storages else v
            for k, v in values.items()
        }

    def jit_option_names(self) -> tuple[str, ...]:
        """``torch.compile``'s keyword arguments (``mode``, ``dynamic``, ``fullgraph``, ``backend``, ...)."""
        return self.keyword_names(torch.compile)

    def jit(self, fn: Callable[..., Any], **options: Any) -> Callable[..., Any]:
        """``torch.compile(fn)``, compiled on its first call (again when input shapes or ``requires_grad``
        change; a dim that changes is then treated as dynamic).

        If torch's compiler backend cannot build on this machine (no working C++ toolchain, ...), the
        function runs eagerly from then on, with one warning saying why.
        """
        compiled = torch.compile(fn, **options)
        state: dict[str, Callable[..., Any]] = {"call": compiled}

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return state["call"](*args, **kwargs)
            except torch._dynamo.exc.BackendCompilerFailed as exc:  # the toolchain, not the user's code
                warnings.warn(
                    f"TorchBackend.jit: torch.compile failed on this machine ({type(exc).__name__}: "
                    f"{str(exc).splitlines()[0] if str(exc) else ''}); running eagerly instead",
                    RuntimeWarning,
                    stacklevel=2,
                )
                state["call"] = fn
                return fn(*args, **kwargs)

        run.compiled = compiled  # type: ignore[attr-defined]  # an attribute of the returned function
        return run


available_devices = TorchBackend.available_devices
