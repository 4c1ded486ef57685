"""``JaxBackend``: arrays are ``jax.Array``; gradients come from ``jax.vjp`` over the generated forward,
which ``ml.compile(jit=True)`` wraps with ``jax.jit``.

Precision scope. JAX computes in 32 bits unless ``jax_enable_x64`` is on, and that flag is global. This
backend never flips it: every backend entry point (array creation, each primitive implementation, the
jitted forward, ``vjp``) runs inside ``jax.enable_x64(backend.x64)``, a thread-local context. A float64
backend therefore computes in float64 while a float32 backend in the same process still computes in
float32 (and ints are int32 there, int64 on a float64 backend). Outside the backend (your own ``jnp``
code, optax), float64 arrays need the same scope: ``with backend.scope(): ...``.

Randomness. The backend owns a PRNG key derived from ``seed``. Eager random ops fold a fresh counter into
it; a jitted forward receives a fresh key as an argument on every call and random ops inside split that
traced key, so every evaluation draws new, seed-reproducible samples even under ``jax.jit``.

Example:
    >>> backend = JaxBackend(dtype="float64", seed=0)
    >>> backend.array([1, 2]).dtype, backend.array([1.5]).dtype
    (dtype('int64'), dtype('float64'))
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar, cast

import jax
import jax.numpy as jnp
import numpy as np
from mithril.errors import ArgumentError, DtypeError
from mithril.extend import Backend, mesh_axis_names, validation, within
from mithril.types import Dtype, Kind

from . import options as _options
from . import sharding

__all__ = ["JaxBackend"]

_X64 = jax.enable_x64  # the thread-local x64 state: ``_X64.value``, and ``with _X64(flag):``
_PLATFORMS = {"cpu": "cpu", "gpu": "gpu", "cuda": "gpu", "tpu": "tpu"}


def _available_devices() -> str:
    return ", ".join(f"{d.platform}:{d.id}" for d in jax.devices()) or "none"


class JaxBackend(Backend[jax.Array]):
    """Backend computing with JAX on CPU, GPU or TPU, in float16, bfloat16, float32 (default) or float64.

    Args:
        dtype: the float dtype of the backend.
        device: ``"cpu"``, ``"gpu"`` (alias ``"cuda"``) or ``"tpu"``, optionally with an index (``"gpu:1"``).
        seed: seed of the backend's PRNG key and of ``randomize_params``; ``None`` draws one.
        jit: ``False`` makes :meth:`jit` the identity (eager execution) even for ``ml.compile(jit=True)``.
        device_mesh: a tuple of mesh sizes (``(2,)``, ``(2, 2)``); builds ``backend.mesh``, a
            ``jax.sharding.Mesh`` over the first ``prod(device_mesh)`` devices of the platform, with axes
            ``"mesh_0"``, ``"mesh_1"``, ... Arrays made by the backend are replicated over it.
        precision: a dtype name (``"float64"``, ``"bfloat16"``: the backend dtype) or a matmul precision
            (``jax.lax.Precision.HIGHEST``, ``"high"``, ...: the default precision of every dot/conv the
            backend runs, as ``jax.default_matmul_precision`` scoped to the backend).
        xla_flags: XLA flags (``["--xla_cpu_enable_fast_math=false"]``) added to ``XLA_FLAGS`` before JAX
            starts; an error once JAX has started (XLA reads the variable once).
        debug: NaN checking (``jax.debug_nans``) in everything the backend runs: an operation producing a
            NaN raises ``FloatingPointError``.
        platform: ``"cpu"``, ``"gpu"`` or ``"tpu"``: the same as ``device``.
        jit_compile: the same as ``jit``.

    Example:
        >>> backend = JaxBackend(precision=jax.lax.Precision.HIGHEST, debug=True, platform="cpu")
        >>> backend.matmul_precision, backend.debug, backend.device
        ('highest', True, 'cpu')
    """

    backend_type: ClassVar[str] = "jax"
    supports_autograd: ClassVar[bool] = True
    supported_dtypes: ClassVar[tuple[Dtype, ...]] = (Dtype.float16, Dtype.bfloat16, Dtype.float32, Dtype.float64)
    devices: ClassVar[tuple[str, ...]] = tuple(_PLATFORMS)
    prng_keys = True
    _key: jax.Array
    """The backend's PRNG key (made by :meth:`set_seed`)."""

    def __init__(
        self,
        dtype: Dtype | str = Dtype.float32,
        device: str = "cpu",
        seed: int | None = None,
        jit: bool = True,
        device_mesh: Sequence[int] | None = None,
        precision: Any = None,
        xla_flags: Sequence[str] | None = None,
        debug: bool = False,
        platform: str | None = None,
        jit_compile: bool | None = None,
        **unknown: Any,
    ) -> None:
        self.check_options(unknown)
        self.xla_flags = _options.apply_xla_flags(xla_flags) if xla_flags is not None else ()
        named = _options.precision_dtype(precision) if precision is not None else None
        dtype = self.synonym("dtype", dtype, "precision", named, Dtype.float32, key=Dtype.parse)
        self.matmul_precision = _options.matmul_precision(precision) if precision is not None else None
        self.debug = validation.boolean("JaxBackend", "debug", debug)
        device = self.synonym("device", device, "platform", platform, "cpu", key=lambda d: str(d).partition(":")[0])
        if jit_compile is not None:
            jit = validation.boolean("JaxBackend", "jit_compile", jit_compile)
        self.x64 = Dtype.parse(dtype) is Dtype.float64
        self._local = threading.local()
        self._counter = 0
        self.jax_device = self._resolve_device(device)
        if device_mesh is not None:
            self.device_mesh, self.mesh = self._build_mesh(self.mesh_sizes(device_mesh))
        self.jit_enabled = bool(jit)
        self._wrapped: dict[str, Callable[..., Any]] = {}
        super().__init__(dtype, device, seed)

    # -- the manual's backend-wide switches ------------------------------------------------------
    def set_platform(self, platform: str) -> None:
        """Move the backend to ``"cpu"``, ``"gpu"`` or ``"tpu"`` (optionally ``"gpu:1"``): arrays it makes
        from now on go there. Refused for a backend with a device mesh (the mesh fixes its devices)."""
        if self.mesh is not None:
            raise ArgumentError(
                f"JaxBackend.set_platform({platform!r}): this backend has device_mesh={self.device_mesh}; "
                "create a new backend instead"
            )
        self.jax_device = self._resolve_device(platform)
        self.device = str(platform)
        self._key = jax.device_put(self._key, self.jax_device)

    def enable_x64(self) -> None:
        """Compute in float64 from now on (``jax_enable_x64`` for this backend only: its dtype becomes
        float64 and ints int64; other backends and models compiled before keep theirs)."""
        self.x64 = True
        self.dtype = Dtype.float64
        self._wrapped.clear()

    # -- devices ---------------------------------------------------------------------------------
    def _platform_devices(self, device: str) -> list[Any]:
        name, _, _ = str(device).partition(":")
        platform = _PLATFORMS.get(name)
        if platform is None:
            raise ArgumentError(
                f"JaxBackend: unknown device {device!r}; use one of {', '.join(_PLATFORMS)} "
                f"(available: {_available_devices()})"
            )
        try:
            return list(jax.devices(platform))
        except RuntimeError:
            raise ArgumentError(
                f"JaxBackend: device {device!r} is not available; JAX sees: {_available_devices()}. "
                f"Install the matching jax build (e.g. 'pip install \"jax[cuda12]\"') or use device='cpu'."
            ) from None

    def _resolve_device(self, device: str) -> Any:
        found = self._platform_devices(device)
        _, _, index = str(device).partition(":")
        position = int(index) if index else 0
        if position >= len(found):
            raise ArgumentError(f"JaxBackend: device {device!r} does not exist; JAX sees: {_available_devices()}")
        return found[position]

    def _build_mesh(self, sizes: tuple[int, ...]) -> tuple[tuple[int, ...], Any]:
        found = self._platform_devices(self.jax_device.platform)
        needed = math.prod(sizes)
        if needed > len(found):
            raise ArgumentError(
                f"JaxBackend: device_mesh={sizes} needs {needed} {self.jax_device.platform} devices, but only "
                f"{len(found)} are available ({_available_devices()}). To simulate more CPU devices, set "
                f"XLA_FLAGS=--xla_force_host_platform_device_count={needed} before JAX starts"
            )
        from jax.sharding import Mesh

        grid = np.array(found[:needed], dtype=object).reshape(sizes)
        return sizes, Mesh(grid, mesh_axis_names(len(sizes)))

    @property
    def placement(self) -> Any:
        """Where new arrays go: the device, or a replicated ``NamedSharding`` over ``mesh``."""
        if self.mesh is None:
            return self.jax_device
        from jax.sharding import NamedSharding, PartitionSpec

        return NamedSharding(self.mesh, PartitionSpec())  # type: ignore[no-untyped-call]  # P.__new__ unannotated

    def shard(self, array: Any, *spec: str | None) -> Any:
        """Place ``array`` on the mesh with ``PartitionSpec(*spec)`` (``backend.shard(x, "mesh_0")``
        splits axis 0 over the first mesh axis)."""
        if self.mesh is None:
            raise ArgumentError("JaxBackend.shard needs a backend created with device_mesh=...")
        return self.place(array, spec)

    def place_on_mesh(self, array: Any, spec: Sequence[str | None] | None) -> Any:
        """``array`` as a ``jax.Array`` over the mesh with ``PartitionSpec(*spec)`` (``None``: replicated);
        see :mod:`mithril_backend_jax.sharding`.

        >>> backend = JaxBackend(device_mesh=(1,))
        >>> backend.place(backend.ones(2, 3), ("mesh_0", None)).shape
        (2, 3)
        """
        return sharding.place(self.mesh, array, spec)

    # -- precision scope -------------------------------------------------------------------------
    def scope(self) -> contextlib.AbstractContextManager[Any]:
        """The context every backend computation runs in: ``jax.enable_x64(self.x64)``, and the
        backend's matmul precision and NaN checking when it was created with ``precision=``/``debug=``."""
        if not self._has_settings():
            return cast(contextlib.AbstractContextManager[Any], jax.enable_x64(self.x64))
        stack = contextlib.ExitStack()
        stack.enter_context(jax.enable_x64(self.x64))
        if self.matmul_precision is not None:
            stack.enter_context(jax.default_matmul_precision(self.matmul_precision))
        if self.debug:
            stack.enter_context(jax.debug_nans(True))
        return stack

    def _has_settings(self) -> bool:
        return self.__dict__.get("matmul_precision") is not None or self.__dict__.get("debug", False)

    def _scoped(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        x64 = self.x64
        if self._has_settings():
            return within(self.scope, fn)

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            if _X64.value == x64:  # already in the right precision: skip the (slower) context switch
                return fn(*args, **kwargs)
            with _X64(x64):
                return fn(*args, **kwargs)

        return call

    def implementation(self, primitive: str) -> Callable[..., Any]:
        """The implementation of ``primitive``, run inside :meth:`scope`."""
        fn = self._wrapped.get(primitive)
        if fn is None:
            fn = self._wrapped[primitive] = self._scoped(super().implementation(primitive))
        return fn

    def _forget_implementation(self, primitive: str) -> None:
        self._wrapped.pop(primitive, None)

    # -- dtypes ----------------------------------------------------------------------------------
    def kind_dtype(self, kind: Kind) -> Dtype:
        """``int`` is int64 on a float64 backend and int32 otherwise (JAX without x64 has no int64)."""
        if kind == "int":
            return Dtype.int64 if self.x64 else Dtype.int32
        return super().kind_dtype(kind)

    def native_dtype(self, dtype: Dtype | Kind | None = None) -> np.dtype:
        """``None`` or ``"float"`` -> the backend float dtype; ``"int"`` -> int64/int32; ``"bool"`` -> bool.

        An explicit ``int64`` maps to int32 (and ``float64`` is refused) on a backend without x64.

        >>> JaxBackend().native_dtype("int")
        dtype('int32')
        """
        resolved = self.resolve_dtype(dtype)
        if not self.x64:
            if resolved is Dtype.int64:
                resolved = Dtype.int32
            elif resolved is Dtype.float64:
                raise DtypeError(f"{self!r} cannot hold float64 arrays; create JaxBackend(dtype=ml.float64)")
        return np.dtype(jnp.dtype(resolved.value))

    # -- arrays ----------------------------------------------------------------------------------
    def array(self, data: Any, dtype: Dtype | Kind | None = None) -> Any:
        """A ``jax.Array`` from data; floats get the backend dtype, ints int32/int64, bools bool.

        An explicit ``dtype`` (an ``ml.Dtype`` or a kind string) wins. JAX arrays that already have the
        target dtype are returned as they are.

        >>> JaxBackend().array(3.0).dtype
        dtype('float32')
        """
        with self.scope():
            values: jax.Array | np.ndarray = data if isinstance(data, jax.Array) else np.asarray(data)
            kind = "f" if jnp.issubdtype(values.dtype, jnp.floating) else values.dtype.kind
            target = self.target_dtype(kind, dtype, values, data)
            if isinstance(data, jax.Array):
                return data if target is None or data.dtype == target else data.astype(target)
            return jax.device_put(values if target is None else values.astype(target, copy=False), self.placement)

    def to_numpy(self, array: Any) -> np.ndarray:
        """A NumPy copy of a backend array (bfloat16 arrays come back as ``ml_dtypes.bfloat16``)."""
        return sharding.gather(array)

    def is_array(self, value: Any) -> bool:
        """Whether ``value`` is a ``jax.Array`` (tracers included)."""
        return isinstance(value, jax.Array)

    def get_backend_array_type(self) -> type[jax.Array]:
        """``jax.Array`` (also ``backend.DataType``)."""
        return jax.Array

    # -- randomness ------------------------------------------------------------------------------
    def set_seed(self, seed: int | None) -> None:
        """Reseed the backend: its PRNG key (random ops) and the NumPy generator (``randomize_params``)."""
        super().set_seed(seed)
        key_seed = int(self._rng.integers(0, 2**31 - 1)) if self.seed is None else self.seed % (2**31 - 1)
        with self.scope():
            self._key = jax.device_put(jax.random.PRNGKey(key_seed), self.jax_device)
        self._counter = 0

    def get_random_key(self) -> Any:
        """A fresh key from the backend state (each call advances it)."""
        self._counter += 1
        with self.scope():
            return jax.random.fold_in(self._key, self._counter)

    def split_key(self, key: Any, num: int = 2) -> tuple[Any, ...]:
        """``jax.random.split(key, num)`` as a tuple of keys."""
        with self.scope():
            return tuple(jax.random.split(key, num))

    @contextlib.contextmanager
    def random_scope(self, key: Any) -> Iterator[None]:
        """Random ops called inside draw from ``key`` (usually a traced key inside ``jax.jit``)."""
        stack = self._local.__dict__.setdefault("keys", [])
        stack.append(key)
        try:
            yield
        finally:
            stack.pop()

    def next_key(self) -> Any:
        """The key a random op draws with: split from the innermost :meth:`random_scope`, or fresh from
        the backend state when there is none (eager execution)."""
        stack = self._local.__dict__.get("keys")
        if stack:
            stack[-1], key = jax.random.split(stack[-1])
            return key
        return self.get_random_key()

    def seeded_source(self, seed: int) -> Any:
        """``jax.random.PRNGKey(seed)`` (``randn(..., key=seed)``, as Mithril's JAX backend)."""
        with self.scope():
            return jax.random.PRNGKey(seed)

    def draw(self, distribution: str, shape: tuple[int, ...], dtype: Dtype | Kind | None, key: Any = None) -> Any:
        with self.scope():
            key = self.next_key() if key is None else key
            sample = getattr(jax.random, distribution)(key, shape, self.native_dtype(dtype))
            return jax.device_put(sample, self.placement)

    def draw_integers(self, low: int, high: int, shape: tuple[int, ...], key: Any = None) -> Any:
        """Integers uniform in ``[low, high)``."""
        with self.scope():
            key = self.next_key() if key is None else key
            draw = jax.random.randint(key, shape, low, high, dtype=self.native_dtype("int"))
            return jax.device_put(draw, self.placement)

    # -- autograd --------------------------------------------------------------------------------
    def vjp(
        self, fn: Callable[[dict[str, Any]], dict[str, Any]], primals: dict[str, Any], cotangents: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """``jax.vjp`` over the parameter dict. Float outputs take the given cotangents (cast to the
        output dtype; zeros when missing), int/bool outputs take ``float0`` zeros."""
        with self.scope():
            outputs, pullback = jax.vjp(fn, primals)
            seeds: dict[str, jax.Array | np.ndarray] = {}
            for key, value in outputs.items():
                value = jnp.asarray(value)
                if jnp.issubdtype(value.dtype, jnp.inexact):
                    given = cotangents.get(key)
                    seeds[key] = jnp.zeros_like(value) if given is None else jnp.asarray(given, dtype=value.dtype)
                else:
                    seeds[key] = np.zeros(value.shape, dtype=jax.dtypes.float0)
            (grads,) = pullback(seeds)
            return outputs, grads

    def gradient_function(
        self, forward: Callable[..., Any], *, jit: bool, jit_options: dict[str, Any] | None = None
    ) -> Callable[..., Any]:
        """With jit, forward and backward compile into one XLA computation (``jax.jit`` of the ``vjp``),
        as hand-written JAX training steps are; otherwise the default (``vjp`` around the forward)."""
        if not (jit and self.jit_enabled):
            return super().gradient_function(forward, jit=jit, jit_options=jit_options)

        def outputs_and_gradients(params: dict[str, Any], data: dict[str, Any], cotangents: dict[str, Any]) -> Any:
            return self.vjp(lambda p: forward(p, data), params, cotangents)

        return self.jit(outputs_and_gradients, **(jit_options or {}))

    def shape_jit_options(self, static: bool) -> dict[str, Any]:
        """``static_shapes=True`` is what ``jax.jit`` always does (one XLA program per input shape, traced
        again for a new shape); ``False`` is refused: XLA programs have static shapes."""
        if not static:
            raise ArgumentError(
                "ml.compile(static_shapes=False) on JaxBackend: XLA compiles one program per input shape "
                "(jax.jit traces again for every new shape); there are no shape-generic XLA programs. "
                "Use TorchBackend (dynamic=True) or MlxBackend (shapeless=True) for those"
            )
        return {}

    def mixed_precision(self, forward: Callable[..., Any], compute: Dtype) -> Callable[..., Any]:
        """Float inputs cast to ``compute`` on the way in, float outputs back to the backend dtype: inside
        ``jax.jit`` XLA computes in ``compute`` and ``jax.vjp`` returns gradients in the parameters' dtype."""
        low, storage = self.native_dtype(compute), self.native_dtype()

        def cast(values: dict[str, Any], dtype: Any) -> dict[str, Any]:
            floats = {k for k, v in values.items() if hasattr(v, "dtype") and jnp.issubdtype(v.dtype, jnp.floating)}
            return {k: v.astype(dtype) if k in floats else v for k, v in values.items()}

        def run(params: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
            return cast(forward(cast(params, low), cast(data, low)), storage)

        return run

    def jit_option_names(self) -> tuple[str, ...]:
        """``jax.jit``'s keyword arguments, plus ``xla_computation`` (keep the lowered StableHLO text)."""
        return (*self.keyword_names(jax.jit), "xla_computation")

    def jit(self, fn: Callable[..., Any], **options: Any) -> Callable[..., Any]:
        """``jax.jit(fn, **options)`` (the identity, scoped, when the backend was made with ``jit=False``).

        The returned function passes a fresh key from the backend state into the compiled function on
        every call; random ops inside draw from it (see :meth:`random_scope`). ``options`` are ``jax.jit``'s
        (``donate_argnums``, ``static_argnums`` counted over ``fn``'s own arguments: 0 is ``params``);
        a static dict of arrays is compiled in as constants and recompiled when another dict is passed.
        ``xla_computation=True`` keeps the StableHLO text of the first call in ``call.lowered_text``;
        ``call.lower(*args)`` lowers for any arguments.
        """
        record = bool(options.pop("xla_computation", False))
        if not self.jit_enabled:
            if options:
                raise ArgumentError(
                    f"JaxBackend(jit=False): jit_options {sorted(options)} need jax.jit; "
                    "create the backend with jit=True"
                )
            return self._scoped(fn)
        static = _options.argnums(options, "static_argnums")
        jit_kwargs = _options.shifted(options, shift=2)  # the key and the counter come first

        def traced(base_key: Any, counter: Any, *args: Any, **kwargs: Any) -> Any:
            with self.random_scope(jax.random.fold_in(base_key, counter)):
                return fn(*_options.unwrap_static(args), **kwargs)

        compiled = jax.jit(traced, **jit_kwargs)
        x64 = self.x64
        plain = not self._has_settings()

        def arguments(args: tuple[Any, ...]) -> tuple[Any, ...]:
            return (self._key, np.uint32(self._counter), *_options.wrap_static(args, static))

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            # the counter is folded into the key inside the compiled function: no eager dispatch per call
            self._counter += 1
            if plain and _X64.value == x64:
                result = compiled(*arguments(args), **kwargs)
            else:
                with self.scope():
                    result = compiled(*arguments(args), **kwargs)
            # ``call``'s attributes are set below
            if record and call.lowered_text is None:  # type: ignore[attr-defined]
                call.lowered_text = lower(*args, **kwargs).as_text()  # type: ignore[attr-defined]
            return result

        def lower(*args: Any, **kwargs: Any) -> Any:
            with self.scope():
                return compiled.lower(*arguments(args), **kwargs)

        # attributes of the returned function (functools.wraps types it without them)
        call.lowered_text = None  # type: ignore[attr-defined]
        call.lower = lower  # type: ignore[attr-defined]
        call.jitted = compiled  # type: ignore[attr-defined]
        return call
