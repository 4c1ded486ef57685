"""The options of C code generation in one typed object, read by every pass of
:func:`~mithril_backend_c.codegen.generate_source`.

Example:
    >>> options = SourceOptions(prefix="mg0", partitioned=True)
    >>> options.prefix, options.fuse, options.includes
    ('mg0', True, 'all')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from mithril.types import Dtype

__all__ = ["Includes", "SourceOptions"]

Includes = Literal["all", "system", "none"]
"""The ``#include`` lines a generated text starts with: ``"all"`` (the C library headers and ``runtime.h``:
a translation unit compiled against the runtime), ``"system"`` (the C library headers only: the runtime is
inlined before it, as in an exported ``model.c``), ``"none"`` (the text goes into a file that has them)."""


@dataclass(frozen=True)
class SourceOptions:
    """How C is generated.

    ``dtype``: the float type of the code; ``param_names``: the keys passed as parameters (the rest of the
    inputs are data); ``header``: text put in comments at the top; ``prefix``: the prefix of every symbol
    (entry points ``<prefix>_<function>``, kernels ``<prefix>_k<hash>``, constants ``<prefix>_c<hash>``);
    ``max_parts``: the most threads a parallel region uses; ``partitioned``: entry points take ``(args, nt,
    part, nparts)`` and compute only their part (for callers with their own thread pool, e.g. ggml custom
    ops); ``fuse``: fuse elementwise chains and convolution epilogues; ``emitters``: primitive name -> C
    emitter (``None``: the registered ones, :func:`~mithril_backend_c.emitters.emitter_table`);
    ``includes``: the ``#include`` lines of a one-file text (:data:`Includes`); ``quantized``: parameter
    key -> block format (``"q8_0"``, ``"q4_0"``: :mod:`~mithril_backend_c.quantize`) of the parameters
    passed quantized (forward functions only; :func:`~mithril_backend_c.quantize.quantizable_params`
    says which can be).

    >>> SourceOptions(max_parts=4).max_parts
    4
    """

    dtype: Dtype = Dtype.float32
    param_names: frozenset[str] = frozenset()
    header: str = ""
    prefix: str = "mithril"
    max_parts: int = 1
    partitioned: bool = False
    fuse: bool = True
    emitters: Mapping[str, Callable[..., list[str]]] | None = field(default=None, compare=False)
    includes: Includes = "all"
    quantized: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "param_names", frozenset(self.param_names))
        object.__setattr__(self, "max_parts", max(1, int(self.max_parts)))
        object.__setattr__(self, "quantized", dict(self.quantized))
