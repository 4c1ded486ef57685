"""Python code generation: readable source that calls the backend's primitive implementations.

Example of generated code::

    def evaluate(params, data):
        input = data["input"]
        weight = params["weight"]
        bias = params["bias"]
        output = linear(input, weight, bias)
        return {"output": output}
"""

from __future__ import annotations

import keyword
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..graph import Graph, Value
from ..passes.pruning import live_nodes
from .escape import python_comment, python_identifier, python_literal

__all__ = ["FunctionSpec", "PythonProgram", "generate_python"]

_LITERAL_TYPES = (type(None), bool, int, float, str)


def _is_literal(value: Any) -> bool:
    """Whether ``repr(value)`` is valid source evaluating to an equal value of the same type. Subclasses
    are not (``np.float64(4.0)`` is a ``float`` whose repr names ``np``, which the generated code lacks)."""
    if type(value) in _LITERAL_TYPES:
        return not (isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))))
    if type(value) in (tuple, list):
        return all(_is_literal(v) for v in value)
    if isinstance(value, slice):
        return all(_is_literal(v) for v in (value.start, value.stop, value.step))
    return value is Ellipsis


def _returns_tuple(node: Any) -> bool:
    """Whether the call returns a tuple to unpack (``split`` with one section returns a 1-tuple). A backend
    may hand in nodes whose ``spec`` is a stand-in naming another implementation (the NumPy backend's
    in-place calls): without ``returns_tuple`` the output count decides."""
    returns_tuple = getattr(node.spec, "returns_tuple", None)
    return len(node.outputs) > 1 if returns_tuple is None else bool(returns_tuple)


@dataclass
class PythonProgram:
    """Generated source plus the namespace it runs in (implementations and constants).

    ``functions`` maps each generated function to its first and last line (1-based) in ``source``:
    :meth:`load` byte-compiles a function on its first call, as JIT backends trace on theirs (a large
    model's gradient function costs tens of milliseconds to compile and is often never called)."""

    source: str
    namespace: dict[str, Any]
    functions: dict[str, tuple[int, int]] = field(default_factory=dict)

    def load(
        self, filename: str = "<mithril-generated>", *, eager: Collection[str] = ()
    ) -> dict[str, Callable[..., Any]]:
        """Callables by function name (each compiled when first called; tracebacks show ``filename``
        with the lines of :attr:`source`).

        Functions named in ``eager`` are compiled now and returned as themselves: give a framework JIT
        (``torch.compile``, ``jax.jit``) those, never the compile-on-first-call trampoline, whose one code
        object every model shares (``torch.compile`` keeps its compiled graphs per code object, so every
        model would then fill one cache, and after ``torch._dynamo.config.recompile_limit`` of them the
        rest would run uncompiled).

            >>> program = PythonProgram("def f(x):\\n    return x + 1\\n", {}, {"f": (1, 2)})
            >>> program.load(eager=("f",))["f"].__code__.co_name, program.load()["f"](1)
            ('f', 2)
        """
        namespace = dict(self.namespace)
        if not self.functions:
            exec(compile(self.source, filename, "exec"), namespace)  # our own generated code
            return namespace
        lines = self.source.splitlines()
        for name, (first, last) in self.functions.items():
            # blank lines in front keep line numbers those of ``source``
            text = "\n" * (first - 1) + "\n".join(lines[first - 1 : last])
            if name in eager:
                exec(compile(text, filename, "exec"), namespace)  # our own generated code
            else:
                namespace[name] = _compile_on_first_call(name, text, filename, namespace)
        return namespace


def _compile_on_first_call(name: str, text: str, filename: str, namespace: dict[str, Any]) -> Callable[..., Any]:
    compiled: list[Callable[..., Any]] = []

    def call(*args: Any, **kwargs: Any) -> Any:
        if not compiled:
            exec(compile(text, filename, "exec"), namespace)  # our own generated code
            compiled.append(namespace[name])
        return compiled[0](*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call


class _Namer:
    def __init__(self, reserved: set[str]) -> None:
        self.names: dict[int, str] = {}
        self.used = set(reserved)
        self.counter = 0

    def fresh(self, hint: str | None) -> str:
        if hint:
            base = python_identifier(hint)
        else:
            base = f"_t{self.counter}"
            self.counter += 1
        name, i = base, 1
        while name in self.used:
            name, i = f"{base}_{i}", i + 1
        self.used.add(name)
        return name

    def __call__(self, value: Value) -> str:
        if value.id not in self.names:
            self.names[value.id] = self.fresh(value.name)
        return self.names[value.id]


@dataclass
class FunctionSpec:
    """One generated function: what it reads, and the dict(s) of values it returns."""

    name: str
    inputs: Mapping[str, Value]
    cotangents: Mapping[str, Value]
    returns: Sequence[Mapping[str, Value]]


def generate_python(
    graph: Graph,
    functions: Sequence[FunctionSpec],
    *,
    param_names: set[str],
    implementations: Mapping[str, Callable[..., Any]],
    to_backend: Callable[[Any], Any],
    header: str,
) -> PythonProgram:
    """Generate one Python function per :class:`FunctionSpec`.

    A function with cotangents takes ``(params, data, cotangents)``; it returns a dict, or a tuple of
    dicts when ``returns`` holds several (``(outputs, gradients)``).
    """
    primitives = sorted({n.spec.name for n in graph.nodes})
    fn_names = {name: f"{name}_" if keyword.iskeyword(name) else name for name in primitives}  # e.g. lambda
    namespace: dict[str, Any] = {fn_names[name]: implementations[name] for name in primitives}
    namer = _Namer(set(fn_names.values()) | {"params", "data", "cotangents"})
    lines = [f"# {python_comment(line)}" for line in header.splitlines()] + [""]

    def ref(value: Value) -> str:
        if value.is_constant and value.producer is None:
            if isinstance(value.const, (bool, int, float)) and _is_literal(value.const):
                return repr(value.const)
            if value.id not in namer.names:
                namer.names[value.id] = namer.fresh(value.name or f"_c{value.id}")
                namespace[namer.names[value.id]] = to_backend(value.const)
            return namer.names[value.id]
        return namer(value)

    def attr_text(attrs: Mapping[str, Any]) -> str:
        parts = []
        for key, value in attrs.items():
            if _is_literal(value):
                parts.append(f"{key}={value!r}")
            else:
                name = namer.fresh(f"_a_{key}")
                namespace[name] = value
                parts.append(f"{key}={name}")
        return ", ".join(parts)

    spans: dict[str, tuple[int, int]] = {}
    for fn in functions:
        body: list[str] = []
        for name, value in fn.inputs.items():
            source = "params" if name in param_names else "data"
            body.append(f"{ref(value)} = {source}[{python_literal(name)}]")
        for name, value in fn.cotangents.items():
            body.append(f"{ref(value)} = cotangents[{python_literal(name)}]")
        targets_all = [v for group in fn.returns for v in group.values()]
        for node in live_nodes(graph.nodes, targets_all):
            args = ", ".join("None" if v is None else ref(v) for v in node.inputs.values())
            call = f"{fn_names[node.spec.name]}({', '.join(p for p in (args, attr_text(node.attrs)) if p)})"
            targets = ", ".join(ref(v) for v in node.outputs.values()) + ("," if _returns_tuple(node) else "")
            comment = f"  # {python_comment(node.path)}" if node.path else ""
            body.append(f"{targets} = {call}{comment}")
        results = [
            "{" + ", ".join(f"{python_literal(k)}: {ref(v)}" for k, v in group.items()) + "}" for group in fn.returns
        ]
        signature = "params, data, cotangents" if fn.cotangents or len(fn.returns) > 1 else "params, data"
        first = len(lines) + 1
        lines.append(f"def {fn.name}({signature}):")
        lines.extend(f"    {line}" for line in body)
        lines.append(f"    return {', '.join(results)}")
        spans[fn.name] = (first, len(lines))
        lines.append("")
    return PythonProgram("\n".join(lines), namespace, spans)
