"""One name per concept: the top-level API's size, deprecated names in one table and nowhere in ``__all__``."""

from __future__ import annotations

import importlib
import warnings

import mithril as ml
import pytest
from mithril.deprecation import DEPRECATED_NAMES


def test_top_level_api_is_the_core_and_unique() -> None:
    assert len(ml.__all__) == len(set(ml.__all__)) <= 120
    for name in ml.__all__:
        assert getattr(ml, name) is not None
    # the manual writes blocks at the top level: they are mithril.models' objects, not copies
    assert ml.Linear is importlib.import_module("mithril.models").Linear


@pytest.mark.parametrize(
    ("module", "old", "canonical"), [(m, o, c) for m, names in DEPRECATED_NAMES.items() for o, c in names.items()]
)
def test_deprecated_names_warn_and_are_the_canonical_objects(module: str, old: str, canonical: str) -> None:
    mod = importlib.import_module(module)
    assert old not in getattr(mod, "__all__", ()) and old not in ml.__all__
    with pytest.warns(DeprecationWarning, match=rf"{module}\.{old} is deprecated; use {module}\.{canonical}"):
        value = getattr(mod, old)
    assert value is getattr(mod, canonical)


def test_deprecated_model_names_also_resolve_at_the_top_level() -> None:
    with pytest.warns(DeprecationWarning, match="MaxPool2D"):
        assert ml.MaxPool2d is ml.MaxPool2D
    with pytest.raises(AttributeError, match="no attribute 'NoSuchBlock'"):
        ml.NoSuchBlock  # noqa: B018


def test_canonical_names_build_without_warnings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        model = ml.Model()
        model |= ml.Conv2d(3, 4)(input="input")
        model += ml.MaxPool2D(2)
        model += ml.models.Absolute()
    assert [type(m).__name__ for _, m in model._children] == ["Conv2d", "MaxPool2D", "Absolute"]
    assert [name for name, _ in model._children] == ["conv2d_0", "max_pool2d_0", "absolute_0"]
