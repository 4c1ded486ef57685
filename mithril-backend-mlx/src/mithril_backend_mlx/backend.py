"""``MlxBackend``: arrays are ``mx.array``; gradients come from ``mx.vjp``; ``ml.compile(jit=True)`` wraps
the generated forward in ``mx.compile``.

Dtypes: float32 (default), float16 and bfloat16 (MLX has no float64 on the GPU, and Mithril keeps the
CPU and GPU builds alike). The ``int`` kind is int64 and ``bool`` is ``mx.bool_``, as on NumPy.

Randomness: the backend owns an ``mx.random`` key, split once per draw. Under ``mx.compile`` the key is
threaded through the compiled function (an argument in, the split-off remainder out), so random primitives
draw fresh samples on every ``evaluate`` and the same sequence, compiled or eager, for the same ``seed``.

Example:
    >>> import mithril as ml
    >>> backend = MlxBackend(dtype=ml.float16, seed=0)
    >>> backend.array([1, 2]).dtype, backend.array([1.5]).dtype
    (mlx.core.int64, mlx.core.float16)
"""

from __future__ import annotations

import secrets
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import mlx.core as mx
import numpy as np
from mithril.errors import ArgumentError, DtypeError, MithrilError
from mithril.extend import Backend, dtype_table, validation
from mithril.types import Dtype, Kind

__all__ = ["MlxBackend"]

_FLOATS = (mx.float16, mx.bfloat16, mx.float32, mx.float64)


class _Traced:
    """What ``mx.compile`` is given in place of a function: a weak reference to it, in an object kept for
    the whole process (:data:`_TRACED`). MLX keys its traces by the address of the object it is given, in
    a cache per thread that only the thread destroying the compiled function clears; an address freed and
    reused by another model's function would give that model, in a thread that had called the first, the
    first one's trace (its outputs). A kept object's address is never reused."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = weakref.ref(fn)

    def __call__(self, *args: Any) -> Any:
        fn = self.fn()
        if fn is None:
            raise MithrilError("MlxBackend: a compiled MLX function outlived the model function it compiles")
        return fn(*args)


_TRACED: list[_Traced] = []
"""Every :class:`_Traced` made (a few dozen bytes per jitted function: never freed, by design)."""

_Jitted = tuple[Callable[..., Any], list[str], Callable[..., Any]]
"""A jitted layout: the compiled function, its output keys (filled by its trace) and the traced function."""

_UNITS = {
    "": 1, "B": 1, "KB": 1024, "KIB": 1024, "MB": 1024**2, "MIB": 1024**2, "GB": 1024**3, "GIB": 1024**3,
    "TB": 1024**4, "TIB": 1024**4,
}  # fmt: skip


def memory_bytes(limit: int | str) -> int:
    """``"4GB"``, ``"512MB"``, ``"1.5GiB"`` or a number of bytes -> bytes (KB/MB/GB/TB are powers of 1024).

    >>> memory_bytes("4GB"), memory_bytes(1024)
    (4294967296, 1024)
    """
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
        return limit
    text = str(limit).strip().upper().replace(" ", "")
    number = text.rstrip("KMGTIB")
    unit = text[len(number):]
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if unit not in _UNITS or value <= 0:
        raise ArgumentError(
            f"MlxBackend(memory_limit={limit!r}): expected a size such as '4GB', '512MB' or a number of bytes"
        )
    return int(value * _UNITS[unit])


def _mx_device(device: Any) -> tuple[str, mx.Device]:
    """``"cpu"``, ``"gpu"``, ``"gpu:1"``, ``mx.cpu``/``mx.gpu`` or ``mx.Device(...)`` -> (name, ``mx.Device``).

    Raises ``ValueError`` for an unknown device or a GPU this MLX build does not have.
    """
    if isinstance(device, mx.Device):  # MLX's Device has no ``index`` attribute; its repr is "Device(gpu, 1)"
        index = repr(device).rstrip(")").rpartition(", ")[2]
        device = f"{device.type.name}:{index}" if index != "0" else device.type.name
    elif isinstance(device, mx.DeviceType):
        device = device.name
    elif not isinstance(device, str):
        raise ArgumentError(f"MlxBackend: device must be 'cpu', 'gpu', mx.cpu or mx.gpu, got {device!r}")
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "gpu") or (index and not index.isdigit()):
        raise ArgumentError(f"MlxBackend: device {device!r} is not available; MLX devices are 'cpu' and 'gpu'")
    if kind == "gpu" and not mx.is_available(mx.gpu):
        raise ArgumentError(
            "MlxBackend(device='gpu'): this MLX build has no GPU (Metal needs macOS on Apple silicon; on Linux "
            "install mlx[cuda] for an NVIDIA GPU). Use device='cpu'."
        )
    return device, mx.Device(getattr(mx, kind), int(index or 0))


def _differentiable(value: Any, float_dtype: Any) -> mx.array:
    """An output as ``mx.vjp`` needs it: a float array (an int/bool output gets a zero, gradient-free stand-in)."""
    if isinstance(value, mx.array) and value.dtype in _FLOATS:
        return value
    return mx.stop_gradient(mx.array(value).astype(float_dtype))


class MlxBackend(Backend[mx.array]):
    """Backend computing with MLX (``mlx.core``) on the CPU (Linux via ``mlx[cpu]``, macOS) or the GPU.

    Args:
        dtype: float dtype: ``ml.float32`` (default), ``ml.float16``, ``ml.bfloat16``, their names, or
            ``mx.float32``/``mx.float16``/``mx.bfloat16``. ``default_dtype=`` is accepted as a synonym.
        device: ``"cpu"`` or ``"gpu"`` (also ``mx.cpu``/``mx.gpu``). MLX's default device is process-wide:
            constructing a backend makes its device the default, and compiled/differentiated calls run
            inside ``mx.stream(device)``.
        seed: seed of the backend's ``mx.random`` key (``None``: a fresh random seed); ``random_seed=`` is
            accepted as a synonym.
        memory_limit: ``mx.set_memory_limit`` (``"4GB"`` or bytes). MLX's limit is process-wide: the last
            backend created with it decides; the previous limit is kept in ``previous_memory_limit``.
        auto_free_tensors: ``True``: freed buffers go back to the system at once (``mx.set_cache_limit(0)``,
            process-wide) instead of staying in MLX's buffer cache.
        compute_precision: the float dtype compiled models compute in when it differs from ``dtype``
            (storage): float inputs are cast to it on the way in and float outputs back to ``dtype``, so
            gradients keep the parameters' dtype (``dtype=mx.float16, compute_precision="float32"``).
        use_graph: whether ``ml.compile`` builds an ``mx.compile`` graph by default (its ``jit=None``);
            ``ml.compile(jit=...)`` still decides per model.

    Example:
        >>> backend = MlxBackend(dtype="float16", compute_precision="float32", use_graph=False, random_seed=0)
        >>> backend.compute_dtype, backend.jit_by_default, backend.seed
        (ml.float32, False, 0)
    """

    backend_type: ClassVar[str] = "mlx"
    supports_autograd: ClassVar[bool] = True
    supported_dtypes: ClassVar[tuple[Dtype, ...]] = (Dtype.float32, Dtype.float16, Dtype.bfloat16)
    native_dtypes = dtype_table(mx, supported_dtypes)
    native_dtype = Backend.dtype_from_table
    prng_keys = True
    xp: ClassVar[Any] = mx
    devices: ClassVar[tuple[str, ...]] = ("cpu", "gpu")
    refused_options: ClassVar[Mapping[str, str]] = {  # options from the MLX guide that mean nothing here
        "use_ane": "MLX has no Apple Neural Engine backend; it computes on the CPU or the GPU (device='cpu'|'gpu')",
        "enable_mps_optimization": (
            "MLX does not go through Metal Performance Shaders; device='gpu' already runs MLX's own Metal kernels"
        ),
    }
    shape_option = "shapeless"  # static_shapes is mx.compile(shapeless=not static_shapes)

    def __init__(
        self,
        dtype: Dtype | str | Any = Dtype.float32,
        device: str | Any = "cpu",
        seed: int | None = None,
        memory_limit: int | str | None = None,
        auto_free_tensors: bool | None = None,
        compute_precision: Dtype | str | Any = None,
        use_graph: bool | None = None,
        random_seed: int | None = None,
        default_dtype: Dtype | str | Any = None,
        **options: Any,
    ) -> None:
        self.check_options(options)
        seed = self.synonym("seed", seed, "random_seed", random_seed)
        dtype = self.synonym("dtype", dtype, "default_dtype", default_dtype, Dtype.float32, key=Dtype.parse)
        name, self._mx_device = _mx_device(device)
        if use_graph is not None:  # per backend here: core declares it a ClassVar, the default of other backends
            self.jit_by_default = validation.boolean("MlxBackend", "use_graph", use_graph)  # type: ignore[misc]
        super().__init__(dtype=dtype, device=name, seed=seed)
        mx.set_default_device(self._mx_device)
        self.compute_dtype = self.dtype if compute_precision is None else Dtype.parse(compute_precision)
        if self.compute_dtype not in self.supported_dtypes:
            raise DtypeError(
                f"MlxBackend(compute_precision={compute_precision!r}): MLX computes in float32, float16 or bfloat16"
            )
        self.previous_memory_limit = (
            mx.set_memory_limit(memory_bytes(memory_limit)) if memory_limit is not None else None
        )
        if auto_free_tensors is not None:
            if not validation.boolean("MlxBackend", "auto_free_tensors", auto_free_tensors):
                raise ArgumentError(
                    "MlxBackend(auto_free_tensors=False): MLX frees an array when its last reference goes away; "
                    "it cannot keep unused arrays alive (keep a reference instead)"
                )
            mx.set_cache_limit(0)

    # -- device ----------------------------------------------------------------------------------
    def set_default_device(self, device: str | Any) -> None:
        """Move this backend (and MLX's process-wide default device) to ``"cpu"`` or ``"gpu"``."""
        self.device, self._mx_device = _mx_device(device)
        mx.set_default_device(self._mx_device)

    def get_memory_info(self) -> dict[str, float]:
        """MLX allocator statistics in MB: ``used`` (active), ``peak`` and ``cache``."""
        mb = 1024.0 * 1024.0
        return {
            "used": mx.get_active_memory() / mb,
            "peak": mx.get_peak_memory() / mb,
            "cache": mx.get_cache_memory() / mb,
        }

    # -- arrays ----------------------------------------------------------------------------------
    def array(self, data: Any, dtype: Dtype | Kind | None = None) -> mx.array:
        """An ``mx.array`` from data (lists, scalars, NumPy or MLX arrays); floats get the backend dtype,
        ints int64, bools bool. An explicit ``dtype`` (an ``ml.Dtype`` or a kind string) wins.

        >>> MlxBackend().array(3.0).dtype
        mlx.core.float32
        """
        values: mx.array | np.ndarray
        if isinstance(data, mx.array):
            values, kind = data, "f" if data.dtype in _FLOATS else "b" if data.dtype == mx.bool_ else "i"
        else:
            values = np.asarray(data)
            kind = values.dtype.kind
        target = self.target_dtype(kind, dtype, values, data)
        if not isinstance(values, mx.array):  # mx.array has no float64 on every device
            values = mx.array(values.astype(np.float32) if kind == "f" and values.dtype.itemsize > 4 else values)
        return values if target is None or values.dtype == target else values.astype(target)

    def to_numpy(self, array: Any) -> np.ndarray:
        """A NumPy copy; bfloat16 (which NumPy lacks) comes back as float32 holding the same values."""
        if isinstance(array, mx.array):
            if array.dtype == mx.bfloat16:
                array = array.astype(mx.float32)
            return np.array(array)
        return np.asarray(array)

    def is_array(self, value: Any) -> bool:
        """Whether ``value`` is an ``mx.array``."""
        return isinstance(value, mx.array)

    def get_backend_array_type(self) -> type[mx.array]:
        """``mx.array`` (also ``backend.DataType``)."""
        return mx.array

    def to_mlx(self, array: Any) -> mx.array:
        """The ``mx.array`` itself; other data goes through :meth:`array`."""
        return array if isinstance(array, mx.array) else self.array(array)

    def from_mlx(self, array: Any) -> mx.array:
        """An ``mx.array`` in this backend's dtypes (floats cast to the backend dtype, ints to int64)."""
        if not isinstance(array, mx.array):
            raise DtypeError(f"MlxBackend.from_mlx expects an mlx.core.array, got {type(array).__name__}")
        return self.array(array)

    # -- randomness ------------------------------------------------------------------------------
    def set_seed(self, seed: int | None) -> None:
        """Reseed the backend's ``mx.random`` key (and the NumPy generator used by ``randomize_params``)."""
        super().set_seed(seed)
        self._key = mx.random.key(secrets.randbits(63) if seed is None else int(seed))

    def next_key(self) -> mx.array:
        """A fresh ``mx.random`` key; the backend keeps the other half of the split."""
        self._key, sub = mx.random.split(self._key)
        return sub

    def seeded_source(self, seed: int) -> mx.array:
        """``mx.random.key(seed)`` (``randn(..., key=seed)``, as Mithril's MLX backend)."""
        return mx.random.key(seed)

    def draw(self, distribution: str, shape: tuple[int, ...], dtype: Dtype | Kind | None, key: Any = None) -> Any:
        sample = getattr(mx.random, distribution)(shape=shape, key=self.next_key() if key is None else key)
        return sample.astype(self.native_dtype(dtype))

    def draw_integers(self, low: int, high: int, shape: tuple[int, ...], key: Any = None) -> mx.array:
        return mx.random.randint(low, high, shape, dtype=mx.int64, key=self.next_key() if key is None else key)

    def evaluate_constant(self, primitive: str, inputs: Sequence[Any], attrs: dict[str, Any]) -> Any:
        """The folded value, evaluated now: MLX is lazy, and an unevaluated array belongs to the stream of
        the thread that made it, so a model compiled in one thread could not be evaluated in another
        ("There is no Stream(cpu, 0) in current thread")."""
        value = super().evaluate_constant(primitive, inputs, attrs)
        if value is not NotImplemented:
            mx.eval([v for v in (value if isinstance(value, (tuple, list)) else (value,)) if isinstance(v, mx.array)])
        return value

    # -- autograd ----------------------------------------------------------------------------------
    def vjp(
        self, fn: Callable[[dict[str, Any]], dict[str, Any]], primals: dict[str, Any], cotangents: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """``mx.vjp`` over the float parameters (flattened in key order). ``cotangents`` names the float
        outputs (the caller fills missing ones with zeros); int/bool outputs get no cotangent and int/bool
        parameters get zero gradients. The forward runs once."""
        names = [k for k, v in primals.items() if isinstance(v, mx.array) and v.dtype in _FLOATS]
        order = list(cotangents)
        outputs: dict[str, Any] = {}

        def flat(*arrays: mx.array) -> list[mx.array]:
            outputs.clear()
            outputs.update(fn({**primals, **dict(zip(names, arrays, strict=True))}))
            results = [_differentiable(outputs[key], self.native_dtype()) for key in order]
            if len(results) > 1:
                # two outputs can be one graph node (CSE twins; broadcast_to/reshape to the same shape
                # return a new Python object for the same node): mx.vjp would pull back only one of their
                # cotangents, so every output gets a node of its own
                results = [value + 0 for value in results]
            return results

        with mx.stream(self._mx_device):
            gradients = {k: mx.zeros_like(v) if isinstance(v, mx.array) else v for k, v in primals.items()}
            if not order or not names:
                return dict(fn(dict(primals))), gradients
            seeds = [self.array(cotangents[k]) for k in order]
            _, grads = mx.vjp(flat, [primals[k] for k in names], seeds)
            gradients.update(zip(names, grads, strict=True))
        return dict(outputs), gradients

    def prepare_forward(
        self, forward: Callable[..., Any], *, jit: bool, jit_options: dict[str, Any] | None = None
    ) -> Callable[..., Any]:
        """The default; with a ``compute_precision`` other than ``dtype`` the forward computes in it (float
        inputs cast on the way in, float outputs cast back), inside the compiled graph."""
        if self.compute_dtype is not self.dtype:
            forward = self._computing_in(forward, self.native_dtype(self.compute_dtype), self.native_dtype())
        return super().prepare_forward(forward, jit=jit, jit_options=jit_options)

    def mixed_precision(self, forward: Callable[..., Any], compute: Dtype) -> Callable[..., Any]:
        """As ``compute_precision=``: float inputs cast to ``compute``, float outputs back."""
        return self._computing_in(forward, self.native_dtype(compute), self.native_dtype())

    @staticmethod
    def _computing_in(forward: Callable[..., Any], compute: Any, storage: Any) -> Callable[..., Any]:
        def cast(values: Mapping[str, Any], dtype: Any) -> dict[str, Any]:
            return {
                k: v.astype(dtype) if isinstance(v, mx.array) and v.dtype in _FLOATS else v for k, v in values.items()
            }

        def run(params: Mapping[str, Any], data: Mapping[str, Any]) -> dict[str, Any]:
            return cast(forward(cast(params, compute), cast(data, compute)), storage)

        return run

    def jit_option_names(self) -> tuple[str, ...]:
        """``mx.compile``'s keyword arguments (``shapeless``, ``inputs``, ``outputs``)."""
        return ("inputs", "outputs", "shapeless")

    def jit(self, fn: Callable[..., Any], **options: Any) -> Callable[..., Any]:
        """``mx.compile`` of ``fn(params, data) -> outputs``, compiled per key layout over flat lists.

        The backend's random key is threaded through as state: it goes in as the first argument and the
        key left after the random primitives' splits comes back as the last output, so compiled and
        eager evaluation draw the same samples and each call draws fresh ones."""
        compiled: dict[tuple[tuple[str, ...], tuple[str, ...]], _Jitted] = {}
        backend = self

        def build(param_keys: tuple[str, ...], data_keys: tuple[str, ...]) -> _Jitted:
            output_keys: list[str] = []
            n_params = len(param_keys)

            def flat(key: mx.array, *arrays: mx.array) -> list[mx.array]:
                saved, backend._key = backend._key, key
                try:
                    params = dict(zip(param_keys, arrays[:n_params], strict=True))
                    data = dict(zip(data_keys, arrays[n_params:], strict=True))
                    outputs = fn(params, data)
                    key_out = backend._key
                finally:
                    backend._key = saved
                output_keys[:] = list(outputs)
                return [*(v if isinstance(v, mx.array) else mx.array(v) for v in outputs.values()), key_out]

            _TRACED.append(_Traced(flat))
            return mx.compile(_TRACED[-1], **options), output_keys, flat  # the entry keeps ``flat`` alive

        def run(params: Mapping[str, Any], data: Mapping[str, Any]) -> dict[str, Any]:
            layout = (tuple(params), tuple(data))
            if layout not in compiled:
                compiled[layout] = build(*layout)
            flat, output_keys, _ = compiled[layout]
            with mx.stream(backend._mx_device):
                *values, backend._key = flat(backend._key, *params.values(), *data.values())
            return dict(zip(output_keys, values, strict=True))

        run.__wrapped__ = fn  # type: ignore[attr-defined]  # an attribute of the returned function
        return run
