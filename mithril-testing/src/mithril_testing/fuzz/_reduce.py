"""Recipe-level reduction of a disagreement, after Hypothesis has shrunk it.

Hypothesis shrinks the *choices* that generated a model; a few model-level edits it cannot express make a
reproduction much smaller. :func:`reduce_disagreement` tries them greedily and keeps every edit after
which the model is still valid for the generator (:func:`~mithril_testing.fuzz.valid_recipe`) and still
fails with the same signature:

- drop an exposed output (and then the calls nothing needs any more);
- expose an operand of an output's call instead of its result (the call goes);
- cut an edge: feed a call's operand from a new input holding the same value, so the calls that computed
  it can go;
- drop the dead calls, unused inputs and ``discard_keys``; make constants and implicit data plain data.

Finally names are renumbered in order (``x0, x1, ...``, ``v0, v1, ...``).

Example:
    >>> import numpy as np
    >>> from mithril_testing.fuzz import Recipe
    >>> r = Recipe()
    >>> (a,) = r.add_op("neg", {"input": r.add_input(np.array([1.0, 2.0]), role="param")})
    >>> r.exposed += r.add_op("exp", {"input": a})
    >>> [op.primitive for op in prune(r).ops]
    ['neg', 'exp']
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable

import numpy as np

from ._check import Disagreement, check_recipe
from ._generate import valid_recipe
from ._recipe import Const, Input, Recipe, kind_of_array

__all__ = ["prune", "reduce_disagreement", "renumber"]

Checker = Callable[..., "Disagreement | None"]


def prune(recipe: Recipe) -> Recipe:
    """A copy without calls that no exposed output needs and without unused inputs."""
    r = copy.deepcopy(recipe)
    needed = set(r.exposed)
    kept = []
    for op in reversed(r.ops):
        if any(out in needed for out in op.outputs.values()):
            kept.append(op)
            needed.update(v for v in op.inputs.values() if isinstance(v, str))
    r.ops = kept[::-1]
    used = r.used_inputs()
    r.inputs = {n: i for n, i in r.inputs.items() if n in used}
    r.discard = [d for d in r.discard if d in r.exposed]
    return r


def _fresh_input_name(recipe: Recipe) -> str:
    numbers = [int(n[1:]) for n in recipe.inputs if re.fullmatch(r"x\d+", n)]
    return f"x{max(numbers, default=-1) + 1}"


def _values(recipe: Recipe) -> dict[str, np.ndarray]:
    from ._recipe import evaluate_reference

    return evaluate_reference(recipe, recipe.input_arrays())


def renumber(recipe: Recipe) -> Recipe:
    """A copy with inputs named ``x0, x1, ...`` and values ``v0, v1, ...`` in order of first use."""
    r = copy.deepcopy(recipe)
    mapping: dict[str, str] = {}
    inputs: dict[str, Input] = {}
    count = 0

    def name_of(ref: str) -> str:
        nonlocal count
        if ref not in mapping:
            if ref in r.inputs:
                mapping[ref] = f"x{len(inputs)}"
                inp = r.inputs[ref]
                inp.name = mapping[ref]
                inputs[mapping[ref]] = inp
            else:
                mapping[ref] = f"v{count}"
                count += 1
        return mapping[ref]

    for op in r.ops:
        op.inputs = {k: name_of(v) if isinstance(v, str) else v for k, v in op.inputs.items()}
        op.outputs = {k: name_of(v) for k, v in op.outputs.items()}
    for name in r.inputs:  # inputs no call uses (kept for completeness)
        name_of(name)
    r.inputs = inputs
    r.exposed = [mapping[n] for n in r.exposed]
    r.discard = [mapping[n] for n in r.discard]
    r._counter = count
    return r


Edit = Callable[[], "Recipe | None"]
"""A candidate edit of a model: the smaller model, or ``None`` where the edit does not apply."""


def _edits(recipe: Recipe) -> list[Edit]:
    """Candidate edits, cheapest and most reducing first."""
    edits: list[Edit] = [functools.partial(_pruned, recipe)]
    edits.extend(functools.partial(_drop_output, recipe, n) for n in recipe.exposed)
    producers = {out: op for op in recipe.ops for out in op.outputs.values()}
    for name in recipe.exposed:
        if name in producers:
            operands = dict.fromkeys(
                v for v in producers[name].inputs.values() if isinstance(v, str) and v in producers
            )
            edits.extend(functools.partial(_expose_operand, recipe, name, v) for v in operands)
    for i, op in enumerate(recipe.ops):
        for key, ref in op.inputs.items():
            if isinstance(ref, str) and ref not in recipe.inputs:
                edits.append(functools.partial(_cut, recipe, i, key))
    edits.extend(functools.partial(edit, recipe) for edit in (_drop_discard, _simplify_roles, _plain_constants))
    return edits


def _pruned(recipe: Recipe) -> Recipe | None:
    """The model without what its outputs do not need (``None`` when that is everything)."""
    r = prune(recipe)
    return r if len(r.ops) < len(recipe.ops) or len(r.inputs) < len(recipe.inputs) else None


def _drop_output(recipe: Recipe, name: str) -> Recipe | None:
    """The model without output ``name`` (never its last output)."""
    if len(recipe.exposed) <= 1:
        return None
    r = copy.deepcopy(recipe)
    r.exposed = [n for n in r.exposed if n != name]
    r.discard = [n for n in r.discard if n != name]
    if not r.outputs:
        return None
    return prune(r)


def _cut(recipe: Recipe, op_index: int, key: str) -> Recipe | None:
    """Operand ``key`` of op ``op_index`` replaced by a new input holding its value (float32-exact floats)."""
    r = copy.deepcopy(recipe)
    ref = r.ops[op_index].inputs[key]
    assert isinstance(ref, str)
    value = _values(r)[ref]
    if kind_of_array(value) == "float":
        value = value.astype(np.float32).astype(np.float64)
    name = _fresh_input_name(r)
    r.inputs[name] = Input(name, np.asarray(value), "param" if kind_of_array(value) == "float" else "data")
    r.ops[op_index].inputs[key] = name
    return prune(r)


def _expose_operand(recipe: Recipe, name: str, operand: str) -> Recipe | None:
    """Output ``name``'s last call goes; its ``operand`` is the output instead."""
    r = copy.deepcopy(recipe)
    r.exposed = [operand if n == name else n for n in r.exposed if n != operand]
    r.discard = [n for n in r.discard if n != name]
    return prune(r) if r.outputs else None


def _simplify_roles(recipe: Recipe) -> Recipe | None:
    """Every input a plain parameter or data key, its shape given to ``ml.compile``."""
    r = copy.deepcopy(recipe)
    changed = False
    for inp in r.inputs.values():
        if inp.role in ("data_default", "iokey_value", "set_values", "constant_key") or inp.shape_via != "compile":
            inp.role = "data" if inp.role != "param" else "param"
            inp.shape_via = "compile"
            changed = True
    return r if changed else None


def _drop_discard(recipe: Recipe) -> Recipe | None:
    """The model with no ``discard_keys``."""
    if not recipe.discard:
        return None
    r = copy.deepcopy(recipe)
    r.discard = []
    return r


def _plain_constants(recipe: Recipe) -> Recipe | None:
    """Array constants turned into data inputs."""
    r = copy.deepcopy(recipe)
    changed = False
    for op in r.ops:
        for key, ref in op.inputs.items():
            if isinstance(ref, Const) and isinstance(ref.value, np.ndarray):
                name = _fresh_input_name(r)
                r.inputs[name] = Input(name, np.asarray(ref.value), "data")
                op.inputs[key] = name
                changed = True
    return r if changed else None


def reduce_disagreement(found: Disagreement, *, max_checks: int = 120, check: Checker = check_recipe) -> Disagreement:
    """A disagreement with the same signature on a smaller model (``found`` itself if nothing helps).

    At most ``max_checks`` candidate models are compiled and checked, with ``check`` (``check_recipe`` or
    an :class:`~mithril_testing.fuzz.IsolatedChecker`'s ``check``), the way ``found`` was found
    (:meth:`~mithril_testing.fuzz.Disagreement.check_again`): a lifecycle disagreement is checked by
    running the lifecycle step that failed, alone.
    """
    best = found
    checks = 0
    progress = True
    while progress and checks < max_checks:
        progress = False
        for edit in _edits(best.recipe):
            if checks >= max_checks:
                break
            candidate = edit()
            if candidate is None or not candidate.ops or not valid_recipe(candidate):
                continue
            checks += 1
            result = best.check_again(check, candidate)
            if result is not None and result.signature == best.signature:
                best = result
                progress = True
                break
    final = renumber(best.recipe)
    result = best.check_again(check, final)
    if result is not None and result.signature == best.signature:
        return result
    return best
