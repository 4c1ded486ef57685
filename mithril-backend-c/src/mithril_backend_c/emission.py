"""Emission: the C of every unit of an entry point (a node, or a fused group), as a call of a *kernel*.

A kernel is a function of the pointers its unit reads and writes (plus the thread count, its scratch
space, the random seed and stream, the error array and the number of its first check site, as it needs
them) whose body is the emitter's code. Kernels are named by the hash of their text, so repeated layers
share one kernel each. Where the values live is decided afterwards (:mod:`~mithril_backend_c.allocation`):
a unit records what it stores (:class:`Storage`) and how much scratch space it needs, and its call
(:meth:`UnitCode.call`) is written once the workspace is laid out.

Constant arrays are named by the hash of their bytes (``<prefix>_c<hash>``), so equal constants (each
layer's epsilon, scale ...) share one array.

Example (the emission of ``relu`` on 4 floats)::

    code = emit_function(ctx, [Unit([relu])], layout, fn.returns, options, emitters, {}).units[0]
    code.kernel.prototype   # 'MT_KERNEL int mithril_k5d2c...(int nt, float *p0, float *p1);'
    code.call(None)          # 'mithril_k5d2c...(nt, v1, v2);'
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from mithril.errors import MithrilError, ShapeError
from mithril.extend import Node, Value

from .allocation import UnitMemory
from .context import ALIAS_PRIMITIVES, Ctx, Emitter, IndexSite, KernelFrame
from .csource import Kernel
from .emitters.fused import Unit, elementwise_group
from .emitters.nn import conv_forward
from .layout import FieldLayout, static_shape
from .options import SourceOptions

__all__ = ["EmittedFunction", "Storage", "UnitCode", "emit_function"]


@dataclass(slots=True)
class Storage:
    """Where a value a unit computes lives: ``"alias"`` (a view: ``ref`` is the pointer of the value it
    views), ``"output"`` (a return computed in place: ``ref`` is its struct field), else ``"workspace"``
    (``nbytes`` of the workspace, at the offset the allocator gives it)."""

    value_id: int
    ctype: str
    kind: Literal["alias", "output", "workspace"]
    ref: str = ""
    nbytes: int = 0

    def declaration(self, offsets: Mapping[int, int]) -> str:
        """The pointer's declaration (``offsets``: value id -> workspace offset)."""
        ct, name = self.ctype, f"v{self.value_id}"
        if self.kind == "alias":
            return f"{ct} *{name} = ({ct} *){self.ref};"
        if self.kind == "output":
            return f"{ct} *{name} = ({ct} *)a->{self.ref};"
        return f"{ct} *{name} = ({ct} *)(ws + {offsets[self.value_id]});"


@dataclass(slots=True)
class UnitCode:
    """One unit's code: ``label`` (its comment), the pointers to the constants it reads first
    (``constants``), what it stores, its kernel (``None``: the unit computes nothing, e.g. a view), the
    call's arguments after the thread count and the scratch pointer, whether the kernel can fail an index
    check (``checked``), the scratch bytes it needs and whether its code is exactly one parallel region
    (``one_region``: it can run as independent parts)."""

    label: str
    constants: list[str]
    stored: list[Storage]
    kernel: Kernel | None
    args: list[str]
    checked: bool
    scratch: int
    one_region: bool

    @property
    def memory(self) -> UnitMemory:
        """What the unit needs of the workspace (for :func:`~mithril_backend_c.allocation.allocate`)."""
        return UnitMemory([(s.value_id, s.nbytes) for s in self.stored if s.kind == "workspace"], self.scratch)

    def call(self, scratch: int | None) -> str:
        """The statement calling the kernel (``scratch``: the workspace offset of its scratch space)."""
        assert self.kernel is not None
        args = ["nt", *([f"ws + {scratch}"] if self.scratch else []), *self.args]
        call = f"{self.kernel.name}({', '.join(args)})"
        return f"if ((mt_status = {call}) != MT_OK) goto mt_done;" if self.checked else f"{call};"


@dataclass
class EmittedFunction:
    """An entry point's code before allocation: its units in order, the lines copying the returns not
    computed in place (``copies``; ``copied``: the key and bytes of each), the constants it reads
    (name -> (value, dtype), in order of first use; ``constant_names``: value id -> name), its index
    checks, whether it draws random numbers and the kernels it defines (name -> kernel, in order of first
    use; the units that compute the same thing share one)."""

    units: list[UnitCode] = field(default_factory=list)
    copies: list[str] = field(default_factory=list)
    copied: list[tuple[str, int]] = field(default_factory=list)
    constants: dict[str, tuple[Any, np.dtype]] = field(default_factory=dict)
    constant_names: dict[int, str] = field(default_factory=dict)
    checks: list[IndexSite] = field(default_factory=list)
    random: bool = False
    kernels: dict[str, Kernel] = field(default_factory=dict)


def emit_function(
    ctx: Ctx,
    units: Sequence[Unit],
    layout: FieldLayout,
    returns: Sequence[Mapping[str, Value]],
    options: SourceOptions,
    constant_names: Mapping[int, str],
    kernels: Mapping[str, Kernel],
) -> EmittedFunction:
    """The code of ``units`` (the function's nodes, planned; ``options.emitters`` set) and of the copies of
    ``returns`` not computed in place; ``constant_names`` and ``kernels``: the names given to constants and
    the kernels defined by the functions emitted before."""
    result = EmittedFunction(constant_names=dict(constant_names), kernels=dict(kernels))
    for value_id in layout.pointers:
        ctx.names[value_id] = f"v{value_id}"
    ctx.input_keys.update(layout.input_keys)
    for unit in units:
        result.units.append(_emit_unit(ctx, unit, layout.direct, options, result))
        result.random |= any(n.spec.random for n in unit.nodes)
    for group, fields in zip(returns, layout.returns, strict=True):
        for (key, value), f in zip(group.items(), fields, strict=True):
            if layout.direct.get(value.id) is f:
                continue
            if value.id not in ctx.names:
                if not value.is_constant:
                    raise ShapeError(f"CBackend: output {key!r} is not computed by the graph")
                result.copies.append(_read_constant(ctx, value, options.prefix, result))
            nbytes = math.prod(f.shape) * f.dtype.itemsize
            result.copied.append((key, nbytes))
            if nbytes:
                result.copies.append(f"memcpy(a->{f.name}, {ctx.p(value)}, {nbytes});")
    result.checks = list(ctx.checks)
    result.kernels = {name: k for name, k in result.kernels.items() if name not in kernels}
    return result


def _read_constant(ctx: Ctx, value: Value, prefix: str, result: EmittedFunction) -> str:
    """The declaration of the pointer to constant ``value``'s array (named by its content)."""
    name = result.constant_names.get(value.id)
    if name is None:
        array = np.ascontiguousarray(np.asarray(value.const).astype(ctx.np_dtype(value)))
        name = f"{prefix}_c{hashlib.sha256(array.dtype.str.encode() + array.tobytes()).hexdigest()[:16]}"
        result.constant_names[value.id] = name
    result.constants.setdefault(name, (value.const, ctx.np_dtype(value)))
    ctx.names[value.id] = f"v{value.id}"
    ct = ctx.ct(value)
    return f"{ct} *v{value.id} = ({ct} *){name};"


def _emit_unit(
    ctx: Ctx,
    unit: Unit,
    direct: Mapping[int, Any],
    options: SourceOptions,
    result: EmittedFunction,
) -> UnitCode:
    node = unit.nodes[-1]
    constants = []
    for value in unit.inputs:
        if value.id in ctx.names:
            continue
        if not (value.is_constant and value.producer is None):
            raise ShapeError(f"CBackend: value {value!r} read by {node.path or '<root>'} is not computed before use")
        static_shape(value, value.name or f"constant %{value.id}")
        constants.append(_read_constant(ctx, value, options.prefix, result))
    for member in unit.nodes:
        for key, value in member.outputs.items():
            static_shape(value, f"{member.path or member.spec.name}.{key}")
    values = unit.stored if unit.fused else list(node.outputs.values())
    stored = [_storage(ctx, unit, node, value, direct) for value in values]
    ctx.begin_unit(node)
    try:
        assert options.emitters is not None
        lines = _unit_lines(ctx, unit, node, options.emitters)
    finally:
        frame = ctx.end_kernel()
    one_region = len(ctx.regions) == 1 and lines == ctx.regions[0]
    if not lines:
        return UnitCode(unit.label, constants, stored, None, [], False, frame.scratch, one_region)
    label = ", ".join(n.spec.name for n in unit.nodes)
    kernel, args, checked = _kernel(frame, lines, label, node.id, options, result.kernels)
    return UnitCode(unit.label, constants, stored, kernel, args, checked, frame.scratch, one_region)


def _storage(ctx: Ctx, unit: Unit, node: Node, value: Value, direct: Mapping[int, Any]) -> Storage:
    """Where ``value``, stored by ``unit`` (``node``: its last node), lives; it is named from now on."""
    shape = ctx.shape(value)
    ct = ctx.ct(value)
    ctx.names[value.id] = f"v{value.id}"
    if not unit.fused and node.spec.name in ALIAS_PRIMITIVES:
        source_value = next(v for v in node.inputs.values() if v is not None)
        return Storage(value.id, ct, "alias", ctx.p(source_value))
    if value.id in direct:
        return Storage(value.id, ct, "output", direct[value.id].name)
    return Storage(value.id, ct, "workspace", nbytes=math.prod(shape) * ctx.np_dtype(value).itemsize)


def _unit_lines(ctx: Ctx, unit: Unit, node: Node, emitters: Mapping[str, Emitter]) -> list[str]:
    """The emitter's code of ``unit``; an emitter failing on what it was given is a ``ShapeError`` naming
    the unit, its input shapes and attributes."""
    try:
        if unit.fused:
            return conv_forward(ctx, unit.anchor, unit) if unit.anchor is not None else elementwise_group(ctx, unit)
        return emitters[node.spec.name](ctx, node)
    except (ValueError, IndexError, TypeError, ZeroDivisionError) as exc:
        if isinstance(exc, MithrilError):
            raise
        shapes = {k: list(ctx.shape(v)) for k, v in node.inputs.items() if v is not None}
        raise ShapeError(
            f"the C code generator cannot handle {unit.label} (input shapes {shapes}, attributes "
            f"{dict(node.attrs)}): {exc}"
        ) from exc


def _kernel(
    frame: KernelFrame, lines: list[str], label: str, stream: int, options: SourceOptions, kernels: dict[str, Kernel]
) -> tuple[Kernel, list[str], bool]:
    """The kernel made of ``lines`` (emitted in ``frame``; the one of ``kernels`` with the same text, else a
    new one added to them), the arguments of its call after the thread count and the scratch pointer
    (``stream``: its random stream), and whether it can fail a check."""
    checked = any("MT_FAIL_INDEX" in line for line in lines)
    params, args = ["int nt"], []
    if frame.scratch:
        params.append("char *mt_scr")
    if frame.random:
        params += ["uint64_t mt_seed", "uint64_t mt_salt"]
        args += ["a->seed", f"{stream}ULL"]
    if checked:
        params += ["int64_t *mt_error", "long mt_site0"]
        args += ["a->error", str(frame.site0)]
    if options.partitioned:
        params += ["long mt_part", "long mt_nparts"]
        args += ["mt_part", "mt_nparts"]
    params += [f"{ct} *p{i}" for i, (_, ct) in enumerate(frame.args)]
    args += [caller for caller, _ in frame.args]
    signature = f"({', '.join(params)})"
    body = ["    int mt_status = MT_OK;", "    (void)nt;", *("    " + line for line in lines)]
    if checked:
        body.append("mt_done:")
    body += ["    return mt_status;", "}"]
    text = "\n".join([signature + " {", *body])
    name = f"{options.prefix}_k{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    kernel = kernels.get(name)
    if kernel is None:
        kernel = kernels[name] = Kernel(name, f"MT_KERNEL int {name}{text}", f"MT_KERNEL int {name}{signature};", label)
    return kernel, args, checked
