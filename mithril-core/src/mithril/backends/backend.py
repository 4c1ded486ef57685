"""The ``Backend`` ABC: array creation, conversion, RNG, and every primitive as a method.

A backend package subclasses :class:`Backend`, registers it with ``mithril_register_backends`` and its
primitive implementations with ``mithril_register_impls``. Primitive implementations are reachable as
methods (``backend.relu(x)``, ``backend.sum(x, axis=0)``, ``backend.concat([a, b], axis=0)``), so users
and generated code call the same functions.

Example:
    >>> import mithril as ml
    >>> backend = ml.NumpyBackend(dtype=ml.float64)       # doctest: +SKIP
    >>> backend.sum(backend.ones(2, 3), axis=0)            # doctest: +SKIP
    array([2., 2., 2.])
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Generic

from .. import validation
from ..compiler.codegen.python import generate_python
from ..errors import ArgumentError, DtypeError, MissingAttributeError, UnsupportedPrimitiveError
from ..extension import register_primitive
from ..lazy_numpy import np
from ..lazy_plugins import registry
from ..parallel.plan import indivisible_dimension, mesh_axis_names, mesh_sizes
from ..primitives import shape_rules
from ..primitives.host import host_implementation, with_run_time_attributes
from ..primitives.shape_rules import creation_kind
from ..types import KINDS, Dtype, Kind
from ..types import DataType as ArrayT  # another name here: ``Backend.DataType`` is the property below

__all__ = ["Backend", "NumpyArrays", "ThreadedBackend", "dtype_table", "refuse_wrapping_ints", "within"]


class Backend(ABC, Generic[ArrayT]):
    """Base class of all backends; ``Backend[DataType]`` (``mithril.types.DataType``) in annotations, as in Mithril.

    Class attributes a subclass sets:
        backend_type: registry name (``"numpy"``); implementations are looked up under it.
        supports_autograd: gradients come from the framework's ``vjp`` (JAX, PyTorch, MLX) instead of
            the symbolic backward graph (NumPy, C, GGML).
        codegen: ``"python"`` (generated Python calling the implementations) or a backend-specific name.
        supported_dtypes: dtypes the backend can compute in.
        options: the constructor options it accepts, named in the error for an unknown one (by default
            the keyword parameters of its ``__init__``).
        refused_options: options of other libraries' manuals that mean nothing here: name -> the reason
            (or a function of all given options returning it), raised instead of being ignored.
        native_dtypes: Mithril dtype -> the framework's dtype (:func:`dtype_table`), for :meth:`native_dtype`.
        shape_option: the JIT option that ``ml.compile(static_shapes=...)`` negates (``"dynamic"``).
    """

    backend_type: ClassVar[str] = ""
    supports_autograd: ClassVar[bool] = False
    codegen: ClassVar[str] = "python"
    supported_dtypes: ClassVar[tuple[Dtype, ...]] = (Dtype.float32, Dtype.float64)
    devices: ClassVar[tuple[str, ...]] = ("cpu",)
    options: ClassVar[tuple[str, ...]] = ("dtype", "device", "seed")
    """Constructor options, named in the error for an unknown one."""
    refused_options: ClassVar[Mapping[str, str | Callable[[dict[str, Any]], str]]] = {}
    native_dtypes: ClassVar[Mapping[Dtype, Any]] = {}
    shape_option: ClassVar[str | None] = None
    prng_keys: ClassVar[bool] = False
    """Whether random draws can take an explicit PRNG key (``random_normal(key, ...)``: JAX, MLX)."""
    xp: ClassVar[Any] = None
    """The namespace whose ``zeros``/``ones``/``full``/``arange`` create arrays, with :meth:`creation`'s
    keywords (``torch``, ``mlx.core``); ``None``: NumPy creates them and :meth:`array` converts."""
    jit_by_default: ClassVar[bool] = True
    """What ``ml.compile(jit=None)`` (the default) means on this backend (PyTorch: eager)."""
    updates_in_place: ClassVar[bool] = False
    """Whether the eager training step writes the new parameters and optimizer slots into the old state's
    arrays (PyTorch, as ``torch.optim`` does); the state passed to ``train_step`` is then consumed, as JAX's
    donated one is."""

    device_mesh: tuple[int, ...] | None = None
    """The mesh of devices this backend places arrays over (``None``: one device); see :meth:`place`."""
    mesh: Any = None
    """The framework's mesh object behind :attr:`device_mesh` (backends that have one set it)."""

    def unaliased(self, values: Mapping[str, Any], donated: Iterable[Any]) -> dict[str, Any]:
        """``values`` with a copy of each array that views the memory of a ``donated`` one, so an in-place
        training step cannot change the outputs it returned (a model output that reshapes a parameter);
        backends that never update in place (:attr:`updates_in_place` false) return them as they are."""
        return dict(values)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # array creators defined by a subclass accept ``device_mesh=``/``tensor_split=`` like the base ones
        super().__init_subclass__(**kwargs)
        if "options" not in cls.__dict__:
            params = inspect.signature(cls.__init__).parameters.values()
            cls.options = tuple(p.name for p in params if p.name != "self" and p.kind is not p.VAR_KEYWORD)
        for name in _CREATORS:
            method = cls.__dict__.get(name)
            if method is not None and not getattr(method, "_places", False):
                setattr(cls, name, _placing(method))

    @classmethod
    def available_devices(cls) -> tuple[str, ...]:
        """Devices usable on this machine (override to probe, e.g. ``torch.cuda.is_available()``)."""
        return cls.devices

    def __init__(
        self, dtype: Dtype | str = Dtype.float32, device: str = "cpu", seed: int | None = None, **unknown: Any
    ) -> None:
        self.check_options(unknown)
        self.dtype = Dtype.parse(dtype)
        if self.dtype not in self.supported_dtypes:
            names = ", ".join(d.value for d in self.supported_dtypes)
            raise DtypeError(f"{type(self).__name__} does not compute in {self.dtype.value}; supported: {names}")
        base_device = str(device).split(":")[0]
        available = self.available_devices()
        if base_device not in available:
            raise ArgumentError(
                f"{type(self).__name__}: device {device!r} is not available; available here: {', '.join(available)}"
            )
        self.device = device
        seed = validation.positive_int(type(self).__name__, "seed", seed, optional=True, minimum=0)
        self.seed = seed
        self.set_seed(seed)
        self._impls = registry().impls(self.backend_type)

    def __repr__(self) -> str:
        mesh = f", device_mesh={self.device_mesh}" if self.device_mesh is not None else ""
        return f"{type(self).__name__}(dtype={self.dtype.value}, device={self.device!r}{mesh})"

    # -- constants and the array type (Mithril's names) -------------------------------------------
    @property
    def pi(self) -> float:
        """The constant pi (``math.pi``), as Mithril's ``backend.pi``.

        >>> ml.NumpyBackend().pi   # doctest: +SKIP
        3.141592653589793
        """
        return math.pi

    @property
    def e(self) -> float:
        """Euler's number (``math.e``), as Mithril's ``backend.e``.

        >>> ml.NumpyBackend().e   # doctest: +SKIP
        2.718281828459045
        """
        return math.e

    @property
    def inf(self) -> float:
        """Positive infinity (``math.inf``), as Mithril's ``backend.inf``.

        >>> ml.NumpyBackend().inf   # doctest: +SKIP
        inf
        """
        return math.inf

    def get_backend_array_type(self) -> type[Any]:
        """The class of this backend's arrays (``np.ndarray``, ``torch.Tensor``, ``jax.Array``, ``mx.array``);
        each backend package states its own.

        >>> ml.TorchBackend().get_backend_array_type()   # doctest: +SKIP
        <class 'torch.Tensor'>
        """
        raise UnsupportedPrimitiveError(f"{type(self).__name__} does not state its array type (get_backend_array_type)")

    @property
    def DataType(self) -> type[Any]:
        """The class of this backend's arrays, for annotations (``params: dict[str, backend.DataType]``): the
        same as :meth:`get_backend_array_type`.

        >>> backend = ml.NumpyBackend()   # doctest: +SKIP
        >>> backend.DataType              # doctest: +SKIP
        <class 'numpy.ndarray'>
        """
        return self.get_backend_array_type()

    # -- constructor options ---------------------------------------------------------------------
    def check_options(self, given: Mapping[str, Any]) -> None:
        """Refuse the constructor options left over (``**unknown``): a :attr:`refused_options` one with its
        reason, any other naming the accepted :attr:`options`.

        >>> ml.NumpyBackend().check_options({"colour": 1})   # doctest: +SKIP
        ArgumentError: NumpyBackend got unknown option(s) ['colour']; accepted options: dtype, device, seed
        """
        for name in given:
            if name in self.refused_options:
                reason = self.refused_options[name]
                reason = reason if isinstance(reason, str) else reason(dict(given))
                raise ArgumentError(f"{type(self).__name__} does not support the option {name}=: {reason}")
        if given:
            accepted = ", ".join(self.options)
            name = type(self).__name__
            raise ArgumentError(f"{name} got unknown option(s) {sorted(given)}; accepted options: {accepted}")

    @classmethod
    def synonym(
        cls, name: str, value: Any, alias: str, alias_value: Any, default: Any = None,
        key: Callable[[Any], Any] = lambda v: v,
    ) -> Any:
        """The value of option ``name`` given as ``name=value`` or as its synonym ``alias=alias_value``
        (``None``: not given); given both ways, the two must agree (compared through ``key``).

        >>> Backend.synonym("seed", None, "random_seed", 7)
        7
        """
        if alias_value is None:
            return value
        if key(value) == key(default):
            return alias_value
        if key(value) != key(alias_value):
            both = f"{name}={value!r} and {alias}={alias_value!r}"
            raise ArgumentError(f"{cls.__name__}: {both} disagree; give one of them")
        return value

    # -- dtypes ----------------------------------------------------------------------------------
    @abstractmethod
    def native_dtype(self, dtype: Dtype | Kind | None = None) -> Any:
        """The framework's dtype for a Mithril dtype or kind (``None`` -> the backend's float dtype)."""

    def dtype_from_table(self, dtype: Dtype | Kind | None = None) -> Any:
        """:meth:`native_dtype` read from :attr:`native_dtypes` (a backend states ``native_dtype =
        Backend.dtype_from_table``): ``None`` or ``"float"`` -> the float dtype, ``"int"`` -> :meth:`kind_dtype`.

        >>> ml.NumpyBackend().native_dtype("int")   # doctest: +SKIP
        dtype('int64')
        """
        resolved = self.resolve_dtype(dtype)
        native = self.native_dtypes.get(resolved)
        if native is None:
            *first, last = (d.value for d in self.supported_dtypes)
            use = f"{', '.join(first)} or {last}"
            raise DtypeError(f"{type(self).__name__} cannot represent {resolved.value}; use {use}")
        return native

    def resolve_dtype(self, dtype: Dtype | Kind | None = None) -> Dtype:
        """``None`` -> the backend's dtype; a kind (``"int"``) -> :meth:`kind_dtype`; else ``Dtype.parse``.

        Backends' :meth:`native_dtype` start from this and map the result to the framework's dtype.
        """
        if dtype is None:
            return self.dtype
        if isinstance(dtype, str) and dtype in KINDS:
            return self.kind_dtype(dtype)
        return Dtype.parse(dtype)

    def kind_dtype(self, kind: Kind) -> Dtype:
        """The concrete dtype used for a logical kind on this backend."""
        return {"float": self.dtype, "int": Dtype.int64, "bool": Dtype.bool_}[kind]

    # -- arrays ----------------------------------------------------------------------------------
    @abstractmethod
    def array(self, data: Any, dtype: Dtype | Kind | None = None) -> Any:
        """A backend array from data (lists, NumPy arrays, scalars). Floats get the backend dtype."""

    def tensor(self, data: Any, dtype: Dtype | Kind | None = None) -> Any:
        """Alias of :meth:`array`."""
        return self.array(data, dtype)

    @abstractmethod
    def to_numpy(self, array: Any) -> np.ndarray:
        """A NumPy copy (or view) of a backend array."""

    def from_numpy(self, array: np.ndarray) -> Any:
        return self.array(array)

    @abstractmethod
    def is_array(self, value: Any) -> bool:
        """Whether ``value`` is this backend's native array type."""

    def shape_of(self, array: Any) -> tuple[int, ...]:
        return tuple(array.shape)

    def dtype_of(self, array: Any) -> Dtype:
        return Dtype.parse(str(array.dtype))

    def target_dtype(self, kind: str, dtype: Dtype | Kind | None, values: Any, data: Any) -> Any:
        """The native dtype :meth:`array` gives ``values`` (``data`` as an array) of NumPy dtype ``kind``
        (``"f"``, ``"i"``, ``"u"``, ``"b"``): ``dtype`` when given, the backend float dtype for floats, the
        ``int`` kind's dtype for ints, ``None`` (kept as it is) for bools; other data is refused.

        >>> ml.NumpyBackend().target_dtype("u", None, np.ones(1, np.uint8), [1])   # doctest: +SKIP
        dtype('int64')
        """
        if dtype is not None:
            return refuse_wrapping_ints(type(self).__name__, values, self.native_dtype(dtype))
        if kind == "f":
            return self.native_dtype()
        if kind in ("i", "u"):
            return refuse_wrapping_ints(type(self).__name__, values, self.native_dtype("int"))
        if kind == "b":
            return None
        what = f"{values.dtype} ({type(data).__name__})"
        raise DtypeError(f"{type(self).__name__}.array: unsupported data of dtype {what}")

    @staticmethod
    def _shape(shape: Sequence[Any]) -> tuple[int, ...]:
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            return tuple(shape[0])
        return tuple(shape)

    def creation(self, dtype: Dtype | Kind) -> dict[str, Any]:
        """The keywords the :attr:`xp` creators take for ``dtype`` (PyTorch adds its device)."""
        return {"dtype": self.native_dtype(dtype)}

    def _create(self, name: str, dtype: Dtype | Kind, *args: Any) -> Any:
        if self.xp is None:  # NumPy creates, :meth:`array` converts
            return self.array(getattr(np, name)(*args), dtype)
        return getattr(self.xp, name)(*args, **self.creation(dtype))

    def zeros(self, *shape: int | Sequence[int], dtype: Dtype | Kind | None = None) -> Any:
        return self._create("zeros", creation_kind(dtype), self._shape(shape))

    def ones(self, *shape: int | Sequence[int], dtype: Dtype | Kind | None = None) -> Any:
        return self._create("ones", creation_kind(dtype), self._shape(shape))

    def full(self, shape: Sequence[int], fill_value: float, dtype: Dtype | Kind | None = None) -> Any:
        return self._create("full", creation_kind(dtype, fill_value), tuple(shape), fill_value)

    def zeros_like(self, array: Any) -> Any:
        return self._create("zeros", self.dtype_of(array), self.shape_of(array))

    def ones_like(self, array: Any) -> Any:
        return self._create("ones", self.dtype_of(array), self.shape_of(array))

    def arange(
        self, start: float, stop: float | None = None, step: float = 1, dtype: Dtype | Kind | None = None
    ) -> Any:
        start, stop = (0, start) if stop is None else (start, stop)
        return self._create("arange", creation_kind(dtype, start, stop, step, counting=True), start, stop, step)

    def linspace(self, start: float | Any, stop: float | Any, steps: int, dtype: Dtype | Kind | None = None) -> Any:
        """``steps`` evenly spaced values from ``start`` to ``stop``, both included (Mithril's
        ``backend.linspace``); ``start``/``stop`` may be numbers or 0-d arrays. The backend float dtype unless
        ``dtype``.

        >>> ml.NumpyBackend().linspace(0, 1, 5)   # doctest: +SKIP
        array([0.  , 0.25, 0.5 , 0.75, 1.  ], dtype=float32)
        """
        steps = validation.positive_int(f"{type(self).__name__}.linspace", "steps", steps, minimum=0)
        return self._create("linspace", creation_kind(dtype), start, stop, steps)

    def stack(self, inputs: Sequence[Any], axis: int = 0) -> Any:
        """The arrays ``inputs`` (all of one shape) stacked along a new dimension ``axis`` (Mithril's
        ``backend.stack``).

        >>> b = ml.NumpyBackend()                           # doctest: +SKIP
        >>> b.stack([b.zeros(3), b.ones(3)], axis=1).shape  # doctest: +SKIP
        (3, 2)
        """
        arrays = list(inputs) if isinstance(inputs, (list, tuple)) else None
        if not arrays:
            raise ArgumentError(
                f"{type(self).__name__}.stack: inputs must be a non-empty list of arrays, got {inputs!r}"
            )
        shapes = {tuple(self.shape_of(a)) for a in arrays}
        if len(shapes) > 1:
            raise ArgumentError(f"{type(self).__name__}.stack: arrays of different shapes {sorted(shapes)}")
        if self.codegen != "python":  # C, GGML: primitives are not Python functions; their arrays are NumPy's
            return self.array(np.stack([self.to_numpy(a) for a in arrays], axis=axis))
        expanded = [self.unsqueeze(a if self.is_array(a) else self.array(a), axis=axis) for a in arrays]
        return expanded[0] if len(expanded) == 1 else self.concat(expanded, axis=axis)

    # -- device meshes ---------------------------------------------------------------------------
    def place(self, array: Any, spec: Sequence[str | None] | None) -> Any:
        """``array`` placed over :attr:`device_mesh`: ``spec`` names, per dimension, the mesh axis
        (``"mesh_0"``, ...) that splits it, or ``None``; a ``None`` spec replicates it.

        Backends with a device mesh (JAX, PyTorch) set :attr:`mesh` and implement :meth:`place_on_mesh`;
        without a mesh an array stays as it is and a split spec is an error.
        """
        if self.mesh is not None:
            return self.place_on_mesh(array, spec)
        if spec is None or all(axis is None for axis in spec):
            return array
        raise ArgumentError(
            f"{type(self).__name__}: cannot split an array over a device mesh (spec {tuple(spec)}); "
            "create a backend with device_mesh=... (ml.JaxBackend(device_mesh=(2,)), ml.TorchBackend(device_mesh=(2,)))"
        )

    def place_on_mesh(self, array: Any, spec: Sequence[str | None] | None) -> Any:
        """:meth:`place` on a backend with a :attr:`mesh` (``None`` spec: replicated)."""
        raise UnsupportedPrimitiveError(f"{type(self).__name__} has a mesh but no place_on_mesh")

    def mesh_sizes(self, device_mesh: int | Sequence[int]) -> tuple[int, ...]:
        """A ``device_mesh=`` option (``2``, ``(2, 2)``) as a tuple of positive sizes.

        >>> ml.NumpyBackend().mesh_sizes(2)   # doctest: +SKIP
        (2,)
        """
        return mesh_sizes(type(self).__name__, device_mesh)

    def split_spec(
        self, device_mesh: Sequence[int] | None, tensor_split: Sequence[int | None] | None, rank: int
    ) -> tuple[str | None, ...] | None:
        """The spec of the creators' ``device_mesh=``/``tensor_split=`` keywords for an array of ``rank``
        dimensions: ``tensor_split[i]`` is the array dimension split over mesh axis ``i`` (``None``: that
        axis replicates); no ``tensor_split`` replicates over the mesh.

        >>> Backend.split_spec(ml.JaxBackend(device_mesh=(2,)), (2,), (0,), 2)   # doctest: +SKIP
        ('mesh_0', None)
        """
        if device_mesh is None and tensor_split is None:
            return None
        where = f"{type(self).__name__} array creation"
        if self.device_mesh is None:
            raise ArgumentError(
                f"{where}: device_mesh={device_mesh!r} needs a backend created with device_mesh=..., e.g. "
                f"{type(self).__name__}(device_mesh={tuple(device_mesh or (2,))})"
            )
        if device_mesh is not None:
            mesh = mesh_sizes(where, device_mesh)
            if mesh != self.device_mesh:
                raise ArgumentError(
                    f"{where}: device_mesh={mesh} differs from the backend's device_mesh={self.device_mesh}; arrays "
                    "live on the backend's mesh"
                )
        if tensor_split is None:
            return None
        if not isinstance(tensor_split, (int, tuple, list)):
            raise ArgumentError(
                f"{where}: tensor_split must be a tuple naming, per mesh axis, the array dimension it splits (an int) "
                f"or None; got {tensor_split!r} ({type(tensor_split).__name__})"
            )
        splits = (tensor_split,) if isinstance(tensor_split, int) else tuple(tensor_split)
        if len(splits) > len(self.device_mesh):
            raise ArgumentError(
                f"{where}: tensor_split={splits} names {len(splits)} mesh axes; the mesh {self.device_mesh} has "
                f"{len(self.device_mesh)}"
            )
        spec: list[str | None] = [None] * rank
        for axis, dim in enumerate(splits):
            if dim is None:
                continue
            if isinstance(dim, bool) or not isinstance(dim, int) or not -rank <= dim < rank:
                raise ArgumentError(
                    f"{where}: tensor_split={splits}: entry {axis} ({dim!r}) is not a dimension of a {rank}-d array"
                )
            if spec[dim % rank] is not None:
                raise ArgumentError(f"{where}: tensor_split={splits} splits dimension {dim % rank} over two mesh axes")
            spec[dim % rank] = f"mesh_{axis}"
        return tuple(spec)

    # -- randomness ------------------------------------------------------------------------------
    def set_seed(self, seed: int | None) -> None:
        """Reseed the backend's random generator (used by ``randn``, dropout, ``randomize_params``)."""
        seed = validation.positive_int(type(self).__name__, "seed", seed, optional=True, minimum=0)
        self.seed = seed
        self._rng = np.random.default_rng(seed)

    @property
    def rng(self) -> np.random.Generator:
        return self._rng

    def randn(self, *shape: int | Sequence[int], dtype: Dtype | Kind | None = None, key: int | None = None) -> Any:
        """Standard normal samples of ``shape`` (the backend float dtype unless ``dtype``). ``key`` (an int)
        seeds this one draw, as in Mithril: the same key gives the same numbers and the backend's own
        generator does not advance.

        >>> ml.NumpyBackend().randn(2, 3).shape   # doctest: +SKIP
        (2, 3)
        """
        return self.draw("normal", self._shape(shape), dtype, self._seeded(key, "randn"))

    def rand(self, *shape: int | Sequence[int], dtype: Dtype | Kind | None = None, key: int | None = None) -> Any:
        """Uniform samples in ``[0, 1)`` of ``shape`` (the backend float dtype unless ``dtype``); ``key`` as in
        :meth:`randn`.

        >>> ml.NumpyBackend().rand(4, key=0).shape   # doctest: +SKIP
        (4,)
        """
        return self.draw("uniform", self._shape(shape), dtype, self._seeded(key, "rand"))

    def rand_uniform(
        self, low: float | Any, high: float | Any, *shape: int | Sequence[int],
        dtype: Dtype | Kind | None = None, key: int | None = None,
    ) -> Any:
        """Uniform samples in ``[low, high)`` of ``shape`` (no shape: a 0-d array), Mithril's
        ``backend.rand_uniform``: ``low + (high - low) * rand(*shape)``, so ``low``/``high`` may also be arrays
        that broadcast against ``shape``. The backend float dtype unless ``dtype``; ``key`` as in :meth:`randn`.
        As with NumPy's ``Generator.uniform`` and ``jax.random.uniform``, rounding of that sum can give ``high``
        itself (float32 near 100 is spaced 2**-17 apart: a unit draw within that of 1 rounds up).

        >>> b = ml.TorchBackend()                             # doctest: +SKIP
        >>> x = b.rand_uniform(-2.0, 3.0, 1000, key=7)        # doctest: +SKIP
        >>> bool((x >= -2).all() and (x < 3).all()), x.shape   # doctest: +SKIP
        (True, torch.Size([1000]))
        """
        unit = self.rand(*shape, dtype=dtype, key=key)
        return unit * (high - low) + low

    def randint(
        self,
        low: int,
        high: int,
        *shape: int | Sequence[int],
        dtype: Dtype | Kind | None = None,
        key: int | None = None,
    ) -> Any:
        """Integers uniform in ``[low, high)`` of ``shape`` (``randint(0, 10, 3, 4)`` or ``randint(0, 10,
        (3, 4))``), in the backend's int dtype unless ``dtype``; ``key`` as in :meth:`randn`.

        >>> ml.NumpyBackend().randint(0, 3, (5,), key=1).shape   # doctest: +SKIP
        (5,)
        """
        where = f"{type(self).__name__}.randint"
        low, high = self._integer(where, "low", low), self._integer(where, "high", high)
        if high <= low:
            raise ArgumentError(f"{where}: high ({high}) must be greater than low ({low})")
        if dtype is not None and self.resolve_dtype(dtype).kind != "int":
            raise DtypeError(f"{where}: dtype must be an integer dtype, got {self.resolve_dtype(dtype).value}")
        ints = self.draw_integers(low, high, self._shape(shape), self._seeded(key, "randint"))
        return ints if dtype is None or self.resolve_dtype(dtype) == self.kind_dtype("int") else self.array(ints, dtype)

    def _integer(self, where: str, name: str, value: Any) -> int:
        """``value`` (an int, or a 0-d integer array) as an int."""
        if validation.is_int(value):
            return int(value)
        if self.is_array(value) and tuple(self.shape_of(value)) == () and self.dtype_of(value).kind == "int":
            return int(value)
        raise validation.fail(where, name, "an int", value)

    def _seeded(self, key: int | None, where: str) -> Any:
        """The ``key=`` of :meth:`randn`/:meth:`rand`/:meth:`randint`: ``None`` (draw from the backend's
        generator) or the source :meth:`seeded_source` makes of the int."""
        key = validation.positive_int(f"{type(self).__name__}.{where}", "key", key, optional=True, minimum=0)
        return None if key is None else self.seeded_source(key)

    def seeded_source(self, seed: int) -> Any:
        """A source of randomness seeded with ``seed``, in the form :meth:`draw` and :meth:`draw_integers` take
        as ``key``: a ``np.random.Generator`` here; a PRNG key on backends with :attr:`prng_keys`, a
        ``torch.Generator`` on PyTorch.

        >>> b = ml.NumpyBackend()                                                         # doctest: +SKIP
        >>> b.draw("uniform", (2,), None, b.seeded_source(0)) == b.rand(2, key=0)         # doctest: +SKIP
        array([ True,  True])
        """
        return np.random.default_rng(seed)

    def draw(self, distribution: str, shape: tuple[int, ...], dtype: Dtype | Kind | None, key: Any = None) -> Any:
        """Samples of ``"normal"`` (standard) or ``"uniform"`` (in ``[0, 1)``) from the backend's generator,
        or from ``key`` (a PRNG key on a backend with :attr:`prng_keys`, a :meth:`seeded_source`) (the
        randomness behind :meth:`randn` and :meth:`rand`)."""
        rng = self._rng if key is None else key
        sample = rng.standard_normal if distribution == "normal" else rng.random
        return self.array(sample(shape), dtype)

    def draw_integers(self, low: int, high: int, shape: tuple[int, ...], key: Any = None) -> Any:
        """Integers uniform in ``[low, high)`` in the ``int`` kind's dtype, from the backend's generator or
        ``key`` as in :meth:`draw` (the randomness behind :meth:`randint`; backends override this hook).

        >>> ml.NumpyBackend().draw_integers(0, 2, (3,)).dtype   # doctest: +SKIP
        dtype('int64')
        """
        rng = self._rng if key is None else key
        return self.array(rng.integers(low, high, shape), "int")

    def random_normal(
        self,
        key: Any = None,
        shape: Sequence[int] = (),
        mean: float = 0.0,
        stddev: float = 1.0,
        dtype: Dtype | Kind | None = None,
    ) -> Any:
        """Normal samples ``mean + stddev * randn(shape)`` from the backend's generator (the manual's
        ``backend.random_normal(shape=(3, 4), mean=0.0, stddev=1.0)``). ``key`` is for backends with
        explicit PRNG keys (:attr:`prng_keys`); others refuse one.

        >>> ml.NumpyBackend(seed=0).random_normal(shape=(2,), mean=5.0, stddev=0.0)   # doctest: +SKIP
        array([5., 5.], dtype=float32)
        """
        if key is not None and not self.prng_keys:
            raise ArgumentError(
                f"{type(self).__name__}.random_normal: this backend has no PRNG keys; call it without key= (set_seed "
                "reseeds it)"
            )
        draw = self.draw("normal", tuple(shape), dtype, key)
        return draw if (mean, stddev) == (0.0, 1.0) else self.add(self.multiply(draw, stddev), mean)

    # -- the manual's helper spellings -----------------------------------------------------------
    def reduce_sum(self, input: Any, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Any:
        """``backend.sum`` under the manual's name (``keepdims`` = the primitive's ``keepdim``)."""
        return self.sum(input, axis=axis, keepdim=keepdims)

    def reduce_mean(self, input: Any, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Any:
        """``backend.mean`` under the manual's name."""
        return self.mean(input, axis=axis, keepdim=keepdims)

    def cross_entropy_grad(self, *args: Any, **kwargs: Any) -> Any:
        """Two forms. ``cross_entropy_grad(logits, targets)`` (the manual's): d/d logits of
        ``sum(backend.cross_entropy(logits, targets))``, i.e. ``softmax(logits) - onehot(targets)`` per
        sample, for ``evaluate(..., output_gradients={"output": grad})``. With three arrays
        ``(output_grad, input, target)`` it is the gradient-helper primitive itself.

        >>> b = ml.NumpyBackend(); b.cross_entropy_grad(b.zeros(1, 2), b.array([0]))   # doctest: +SKIP
        array([[-0.5,  0.5]], dtype=float32)
        """
        named = [k for k in ("output_grad", "input", "target") if k in kwargs]
        primitive = Backend.__getattr__(self, "cross_entropy_grad")
        if len(args) + len(named) >= 3:
            return primitive(*args, **kwargs)
        logits, targets = (*args, *(kwargs.pop(k) for k in ("input", "target") if k in kwargs))[:2]
        shape = self.shape_of(logits)
        per_sample = self.ones(*shape[:1], *shape[2:], dtype=self.dtype_of(logits))  # cross_entropy's output shape
        return primitive(per_sample, logits, targets, **kwargs)

    # -- custom operations -----------------------------------------------------------------------
    def register_op(
        self, name: str, *, inputs: Sequence[str] = ("input",), shape_rule: Any = None, type_rule: Any = None
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: ``fn(*inputs)`` (written in the framework's own ops, e.g. ``jnp``) implements the
        primitive ``name`` on this backend instance. A new name is registered as a primitive with
        ``inputs`` (default one ``input``), the shape of its first input (``shape_rule``) and a float
        result (``type_rule``); use it in a model as ``ml.Primitive(name)(input=..., output=...)``.
        Autograd backends differentiate through ``fn``; other backends need ``ml.register_gradient``.

        >>> @backend.register_op("gelu_tanh")                                # doctest: +SKIP
        ... def gelu_tanh(x):
        ...     return 0.5 * x * (1 + jnp.tanh(0.79788456 * (x + 0.044715 * x**3)))
        >>> model += ml.Primitive("gelu_tanh")(input="hidden", output="act")   # doctest: +SKIP
        """
        if name not in registry().primitives:
            register_primitive(
                name,
                inputs=tuple(inputs),
                shape_rule=shape_rule or shape_rules.same_shape,
                type_rule=type_rule or shape_rules.float_result,
            )

        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            self._impls = {**self._impls, name: fn}  # this instance only: other backends keep theirs
            self._forget_implementation(name)
            return fn

        return decorate

    def _forget_implementation(self, primitive: str) -> None:
        """Drop any cached wrapper of ``primitive`` (backends that cache implementations override this)."""
        del primitive  # nothing cached here

    # -- autograd helpers ------------------------------------------------------------------------
    def grad(self, fn: Callable[..., Any], argnums: int | Sequence[int] = 0) -> Callable[..., Any]:
        """``jax.grad``-style: ``backend.grad(f)(x)`` is d f / d x for a scalar ``f`` written in backend
        ops (JAX, PyTorch, MLX: through :meth:`vjp`). ``argnums`` picks the differentiated positional
        argument(s); a tuple gives a tuple of gradients.

        >>> b = ml.JaxBackend()                                                       # doctest: +SKIP
        >>> b.to_numpy(b.grad(lambda x: b.reduce_sum(b.power(x, 2)))(b.tensor([1.0, 2.0, 3.0])))  # doctest: +SKIP
        array([2., 4., 6.], dtype=float32)
        """
        if not self.supports_autograd:
            raise UnsupportedPrimitiveError(
                f"{type(self).__name__}.grad: this backend has no autograd (it differentiates compiled models "
                "symbolically: ml.compile(...).evaluate(params, data, output_gradients=...)); use JaxBackend, "
                "TorchBackend or MlxBackend for grad(f)"
            )
        positions = (argnums,) if isinstance(argnums, int) else tuple(argnums)

        def gradient(*args: Any) -> Any:
            primals = {str(i): args[i] for i in positions}

            def scalar(p: dict[str, Any]) -> dict[str, Any]:
                call = list(args)
                for i in positions:
                    call[i] = p[str(i)]
                return {"value": fn(*call)}

            value = scalar(primals)["value"]
            if tuple(self.shape_of(value)) not in ((), (1,)):
                raise ArgumentError(
                    f"{type(self).__name__}.grad: f must return a scalar, got shape {tuple(self.shape_of(value))}"
                )
            _, grads = self.vjp(scalar, primals, {"value": self.ones_like(value)})
            found = tuple(grads[str(i)] for i in positions)
            return found[0] if isinstance(argnums, int) else found

        return gradient

    # -- primitives as methods -------------------------------------------------------------------
    def implementation(self, primitive: str) -> Callable[..., Any]:
        """The implementation of ``primitive`` on this backend, bound to it when it needs the backend."""
        fn = self._impls.get(primitive)
        if fn is None and self.codegen == "python":
            fn = registry().impls("*").get(primitive) or host_implementation(primitive)
            spec = registry().primitives.get(primitive)
            if fn is None and spec is not None and spec.variant_of is not None:
                base = registry().primitive(spec.variant_of)
                return with_run_time_attributes(spec, base, self.implementation(spec.variant_of))
        if fn is None:
            fn = registry().impl(self.backend_type, primitive)
        if getattr(fn, "_mithril_uses_backend", False):
            return functools.partial(fn, self)
        return fn

    def has_implementation(self, primitive: str) -> bool:
        if primitive in self._impls or (self.codegen == "python" and primitive in registry().impls("*")):
            return True
        spec = registry().primitives.get(primitive)
        if self.codegen != "python":
            return False
        if host_implementation(primitive) is not None:
            return True
        return spec is not None and spec.variant_of is not None and self.has_implementation(spec.variant_of)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise MissingAttributeError(f"{type(self).__name__} has no attribute {name!r}")
        reg = registry()
        if name not in reg.primitives:
            raise MissingAttributeError(f"{type(self).__name__} has no attribute or primitive {name!r}")
        spec = reg.primitives[name]
        impl = self.implementation(name)
        attr_names = list(spec.attributes)

        @functools.wraps(impl)
        def call(*args: Any, **kwargs: Any) -> Any:
            if spec.name == "concat" and args and isinstance(args[0], (list, tuple)):
                kwargs.setdefault("n", len(args[0]))
                attrs = spec.resolve_attributes(kwargs, f"{type(self).__name__}.concat")
                return impl(*args[0], **attrs)
            keys = spec.input_keys({**spec.attributes, **kwargs})
            inputs = list(args[: len(keys)])
            for key in keys[len(inputs) :]:
                if key in kwargs:
                    inputs.append(kwargs.pop(key))
                elif key in spec.optional_inputs:
                    inputs.append(None)
            if len(args) > len(keys) + len(attr_names):
                raise ArgumentError(
                    f"{type(self).__name__}.{name} takes at most {len(keys) + len(attr_names)} positional arguments "
                    f"(inputs {keys}, then attributes {attr_names}), got {len(args)}"
                )
            # the positional arguments after the inputs are the first attributes, the rest by name
            for attr_name, value in zip(attr_names, args[len(keys) :], strict=False):
                kwargs[attr_name] = value
            attrs = spec.resolve_attributes(kwargs, f"{type(self).__name__}.{name}")
            return impl(*inputs, **attrs)

        return call

    # -- code generation (overridden by backends that do not run Python, e.g. C) ------------------
    def generate_program(self, graph: Any, functions: Sequence[Any], *, param_names: set[str], header: str) -> Any:
        """Turn the optimised graph into a program: an object with ``source`` (text shown to users and
        written to ``ml.compile(file_path=...)``) and ``load(filename) -> {function name: callable}``.

        Each :class:`~mithril.compiler.codegen.FunctionSpec` becomes a callable ``fn(params, data)`` (or
        ``fn(params, data, cotangents)``) returning a dict, or a tuple of dicts. The default generates
        Python that calls this backend's primitive implementations.
        """
        primitives = {node.spec.name for node in graph.nodes}
        return generate_python(
            graph,
            functions,
            param_names=param_names,
            implementations={name: self.implementation(name) for name in primitives},
            to_backend=lambda value: value if self.is_array(value) else self.array(value),
            header=header,
        )

    def evaluate_constant(self, primitive: str, inputs: Sequence[Any], attrs: dict[str, Any]) -> Any:
        """Compute one primitive on constant inputs at compile time (constant folding).

        Backends whose implementations are not Python callables return ``NotImplemented`` to skip folding.
        """
        if self.codegen != "python":
            return NotImplemented
        args = [
            v if v is None or isinstance(v, (bool, int, float)) or self.is_array(v) else self.array(v) for v in inputs
        ]
        return self.implementation(primitive)(*args, **attrs)

    # -- autograd (overridden by autograd backends) ----------------------------------------------
    def vjp(
        self, fn: Callable[[dict[str, Any]], dict[str, Any]], primals: dict[str, Any], cotangents: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Autograd backends: run ``outputs = fn(primals)`` and pull ``cotangents`` back through it.

        ``primals`` are the parameters (name -> array); ``cotangents`` has one array for every float
        output (missing ones are already filled with zeros by the caller); non-float outputs (ints,
        bools) get none. Returns ``(outputs, gradients)`` with one gradient per primal.
        """
        raise UnsupportedPrimitiveError(
            f"{type(self).__name__}.vjp: this backend has no autograd; it computes gradients from the symbolic "
            "backward graph (PhysicalModel.evaluate(output_gradients=...))"
        )

    def prepare_forward(
        self, forward: Callable[..., Any], *, jit: bool, jit_options: dict[str, Any] | None = None
    ) -> Callable[..., Any]:
        """The callable ``PhysicalModel.evaluate`` runs for outputs: ``forward(params, data)``, jitted (with
        ``jit_options``, see :meth:`jit`) when asked. Override to add context (a device stream) around
        every call."""
        return self.jit(forward, **(jit_options or {})) if jit else forward

    def gradient_function(
        self, forward: Callable[..., Any], *, jit: bool, jit_options: dict[str, Any] | None = None
    ) -> Callable[..., Any]:
        """Autograd backends: ``fn(params, data, cotangents) -> (outputs, gradients)`` built once per
        compiled model. Override to compile forward and backward together (``jax.jit`` of the ``vjp``)."""
        prepared = self.prepare_forward(forward, jit=jit, jit_options=jit_options)

        def outputs_and_gradients(params: dict[str, Any], data: dict[str, Any], cotangents: dict[str, Any]) -> Any:
            return self.vjp(lambda p: prepared(p, data), params, cotangents)

        return outputs_and_gradients

    def mixed_precision(self, forward: Callable[..., Any], compute: Dtype) -> Callable[..., Any]:
        """``ml.compile(precision="bf16-mixed")``: ``forward(params, data)`` computing in ``compute`` while
        parameters, gradients and optimizer state keep the backend dtype (float32). Autograd backends
        override it (PyTorch: ``torch.autocast``; JAX and MLX: float inputs cast on the way in, float
        outputs cast back); the others refuse."""
        raise ArgumentError(
            f"ml.compile(precision=...): {type(self).__name__} computes in its dtype ({self.dtype.value}); mixed "
            "precision runs on JaxBackend and TorchBackend (bf16-mixed; fp16-mixed with loss scaling on TorchBackend) "
            "and MlxBackend"
        )

    def jit(self, fn: Callable[..., Any], **options: Any) -> Callable[..., Any]:
        """Compile ``fn`` with the framework's JIT, passing ``options`` (``ml.compile(jit_options=...)``) to
        it; the identity by default (no options)."""
        if options:
            raise ArgumentError(
                f"{type(self).__name__} has no JIT compiler, so jit_options {sorted(options)} have nothing to configure"
            )
        return fn

    def jit_option_names(self) -> tuple[str, ...]:
        """The ``ml.compile(jit_options={...})`` keys this backend's JIT takes (none by default)."""
        return ()

    @staticmethod
    def keyword_names(compiler: Callable[..., Any]) -> tuple[str, ...]:
        """The parameters of a JIT compiler after the function it compiles (its ``jit_options``).

        >>> Backend.keyword_names(lambda fn, mode=None, dynamic=None: fn)
        ('mode', 'dynamic')
        """
        return tuple(inspect.signature(compiler).parameters)[1:]

    def shape_jit_options(self, static: bool) -> dict[str, Any]:
        """The JIT options meaning ``ml.compile(static_shapes=static)`` (one program per input shape, or
        shape-generic programs): ``{shape_option: not static}``. Backends without a JIT refuse it."""
        if self.shape_option is not None:
            return {self.shape_option: not static}
        raise ArgumentError(
            f"ml.compile(static_shapes={static}): {type(self).__name__} has no JIT compiler; its generated code runs "
            "for any size of a dimension left symbolic (give shapes= to fix sizes at compile time)"
        )



class NumpyArrays:
    """The array methods of a backend whose arrays are ``np.ndarray`` (NumPy, C, GGML): listed before
    :class:`Backend` in its bases, ``class CBackend(NumpyArrays, Backend[np.ndarray])``.

    >>> class Arrays(NumpyArrays): ...
    >>> Arrays().is_array(np.zeros(2)), Arrays().get_backend_array_type()
    (True, <class 'numpy.ndarray'>)
    """

    def to_numpy(self, array: Any) -> np.ndarray:
        """The array as NumPy (the array itself when it already is one)."""
        return np.asarray(array)

    def is_array(self, value: Any) -> bool:
        """Whether ``value`` is an instance of :meth:`get_backend_array_type` (``np.ndarray``)."""
        return isinstance(value, self.get_backend_array_type())

    def get_backend_array_type(self) -> type[np.ndarray]:
        """``np.ndarray`` (also ``backend.DataType``)."""
        return np.ndarray


def refuse_wrapping_ints(owner: str, values: Any, target: Any) -> Any:
    """``target`` (a native dtype), after checking that the NumPy integers ``values`` fit it: a cast would
    wrap them around (``2**32 + 3`` becomes ``3`` in int32, a valid index). Other values pass unchecked.

        >>> refuse_wrapping_ints("JaxBackend", np.array([0, 2**40]), np.dtype("int32"))
        Traceback (most recent call last):
        ...
        mithril.errors.DtypeError: JaxBackend computes these integers in int32: value 1099511627776 at position (1,) is outside [-2147483648, 2147483647]
    """  # noqa: E501 - a doctest output line (the error message)
    if not isinstance(values, np.ndarray) or values.dtype.kind not in "iu" or values.size == 0:
        return target
    limits = _int_limits(target)
    if limits is None or np.can_cast(values.dtype, limits.dtype, "safe"):
        return target
    low, high = values.min(), values.max()
    if low < limits.min or high > limits.max:
        bad = low if low < limits.min else high
        position = tuple(int(i) for i in np.argwhere(values == bad)[0])
        raise DtypeError(
            f"{owner} computes these integers in {limits.dtype}: value {int(bad)} at position {position} is outside "
            f"[{limits.min}, {limits.max}]"
        )
    return target


def _int_limits(dtype: Any) -> np.iinfo | None:
    """The range of an integer dtype (NumPy's, or a framework's such as ``torch.int32``); ``None`` for others."""
    for name in (dtype, str(dtype).rsplit(".", 1)[-1]):
        try:
            return np.iinfo(name)
        except (TypeError, ValueError):
            continue
    return None


def dtype_table(namespace: Any, floats: Iterable[Dtype], native: Callable[..., Any] = lambda d: d) -> dict[Dtype, Any]:
    """:attr:`Backend.native_dtypes` from a framework namespace: ``namespace.<name>`` (or ``<name>_``, as
    ``mx.bool_``) for the int and bool dtypes and the given ``floats``, each passed through ``native``.

    >>> dtype_table(np, [Dtype.float32], np.dtype)[Dtype.int64]
    dtype('int64')
    """
    dtypes = [*(d for d in Dtype if d.kind != "float"), *floats]
    return {d: native(getattr(namespace, d.value, None) or getattr(namespace, d.value + "_")) for d in dtypes}


def within(context: Callable[[], contextlib.AbstractContextManager[Any]], fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` running inside a fresh ``context()`` on every call (a precision scope, ``torch.autocast``).

    >>> within(contextlib.nullcontext, abs)(-2)
    2
    """

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        with context():
            return fn(*args, **kwargs)

    return call


_CREATORS = ("array", "tensor", "zeros", "ones", "full", "randn", "rand", "rand_uniform", "randint", "linspace")


def _check_divisible(
    backend: Backend[Any], spec: Sequence[str | None] | None, shape: tuple[int, ...], tensor_split: Any
) -> None:
    """Refuse a ``tensor_split`` whose mesh axis does not divide the dimension it splits (before the framework
    fails with its own error, JAX's ``IndivisibleError``, or PyTorch shards unevenly)."""
    if spec is None or backend.device_mesh is None:
        return
    bad = indivisible_dimension(spec, shape, mesh_axis_names(len(backend.device_mesh)), backend.device_mesh)
    if bad is not None:
        dim, axis, devices = bad
        raise ArgumentError(
            f"{type(backend).__name__} array creation: tensor_split={tensor_split!r} splits dimension {dim} of an "
            f"array of shape {shape} over mesh axis {axis} ({devices} devices), but {shape[dim]} is not a multiple of "
            f"{devices}; split a dimension whose size is a multiple of {devices}"
        )


def _placing(create: Callable[..., Any]) -> Callable[..., Any]:
    """``create`` (an array creator) with the ``device_mesh=``/``tensor_split=`` keywords of the manual:
    ``backend.ones(128, 64, device_mesh=(2,), tensor_split=(0,))`` splits dimension 0 over the mesh."""

    @functools.wraps(create)
    def placed(self: Backend[Any], *args: Any, device_mesh: Any = None, tensor_split: Any = None, **kwargs: Any) -> Any:
        array = create(self, *args, **kwargs)
        if device_mesh is None and tensor_split is None:
            return array
        shape = tuple(self.shape_of(array))
        spec = self.split_spec(device_mesh, tensor_split, len(shape))
        _check_divisible(self, spec, shape, tensor_split)
        return self.place(array, spec)

    placed._places = True  # type: ignore[attr-defined]
    return placed


for _name in _CREATORS:
    setattr(Backend, _name, _placing(Backend.__dict__[_name]))


class ThreadedBackend(Backend[ArrayT]):
    """A backend computing on ``threads`` CPU threads (C, GGML): ``threads`` is a positive int, by default
    every core (``os.cpu_count()``); the other options are :class:`Backend`'s. ``class
    CBackend(NumpyArrays, ThreadedBackend[np.ndarray])``; ``CBackend(threads=0)`` raises an ``ArgumentError``.
    """

    def __init__(
        self,
        dtype: Dtype | str = Dtype.float32,
        device: str = "cpu",
        seed: int | None = None,
        threads: int | None = None,
        **unknown: Any,
    ) -> None:
        threads = validation.positive_int(type(self).__name__, "threads", threads, optional=True)
        self.threads: int = (os.cpu_count() or 1) if threads is None else threads
        super().__init__(dtype, device, seed, **unknown)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dtype={self.dtype.value}, device={self.device!r}, threads={self.threads})"
