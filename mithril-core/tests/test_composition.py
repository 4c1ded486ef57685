"""Composition: |=, +=, naming, canonical keys, IOKey constraints, connection arithmetic, connect-time errors."""

import pytest
from mithril.errors import DtypeError, ModelConnectionError, ModelKeyError, ShapeError
from mithril.models import (
    MLP,
    Add,
    Conv2d,
    CrossEntropy,
    Embedding,
    IOKey,
    LayerNorm,
    Linear,
    Model,
    MultiHeadAttention,
    Relu,
    Sum,
)


def test_iadd_connects_canonical_output_to_canonical_input():
    model = Model()
    model |= Linear(8)(input="x")
    model += Relu()
    model += Linear(3)
    assert model.input_keys == ["x"]
    assert model.output_keys == ["output"]
    assert model.shapes["output"][-1] == 3


def test_linear_weight_shape_follows_from_input():
    model = Model()
    model |= Linear(5)(input=IOKey("x", shape=[2, 7]), weight="w", output="y")
    assert model.shapes["w"] == [5, 7]
    assert model.shapes["y"] == [2, 5]


def test_call_and_connect_are_the_same():
    a, b = Model(), Model()
    a |= Linear(4)(input="x")
    b |= Linear(4).connect(input="x")
    assert a.input_keys == b.input_keys


def test_named_output_is_exposed_and_unnamed_stays_internal():
    model = Model()
    model |= Linear(4)(input="x", output="hidden")
    model += Relu()
    assert set(model.output_keys) == {"hidden", "output"}


def test_connect_time_shape_error_names_path_keys_and_shapes():
    model = Model(name="net")
    model |= Linear(4)(input=IOKey("x", shape=[2, 3]), output="h")
    with pytest.raises(ShapeError) as info:
        model |= Add()(left="h", right=IOKey("bias", shape=[5]))
    text = str(info.value)
    assert "add" in text and "left" in text and "right" in text and "[2, 4]" in text and "[5]" in text


def test_unknown_key_lists_the_valid_keys():
    with pytest.raises(ModelKeyError, match="in_size") as info:  # (input_size= is the manual's spelling of in_features)
        Model().__ior__(Linear(10)(in_size=32))
    assert "weight" in str(info.value)


def test_a_model_can_be_added_only_once():
    relu = Relu()
    model = Model()
    model |= relu
    with pytest.raises(ModelConnectionError, match="already part of"):
        Model().__ior__(relu)


def test_two_producers_for_one_key_is_an_error():
    model = Model()
    model |= Relu()(input="x", output="y")
    with pytest.raises(ModelConnectionError, match="one producer"):
        model |= Relu()(input="z", output="y")


def test_constant_on_an_output_is_rejected():
    model = Model()
    model |= Relu()(input="x", output="y")
    with pytest.raises(ModelConnectionError, match="output"):
        model.set_values(y=1.0)


def test_set_shapes_shares_symbols_within_one_call():
    add = Add()
    add.set_shapes(left=["N", 4], right=["N", 4])
    model = Model()
    model |= add(left="a", right="b")
    model.set_shapes(a=[3, None])
    assert model.shapes["b"] == [3, 4]


def test_set_types_conflict_is_a_dtype_error():
    model = Model()
    model |= Embedding(10, 4)(input="ids")
    with pytest.raises(DtypeError, match="int"):
        model.set_types(ids=float)


def test_connection_arithmetic_adds_primitives():
    model = Model()
    model |= Linear(4)(input="x", output="h")
    doubled = model.h * 2.0 + 1.0
    model |= Sum()(input=doubled, output="total")
    assert "total" in model.output_keys
    assert model.shapes["total"] == []


def test_connection_from_another_tree_is_rejected():
    outside = Model()
    outside |= Relu()(input="a", output="b")
    model = Model()
    with pytest.raises(ModelConnectionError, match="outside"):
        model |= Relu()(input=outside.b)


def test_frozen_model_refuses_children():
    model = Model().freeze()
    with pytest.raises(ModelConnectionError, match="frozen"):
        model |= Relu()


def test_child_names_and_paths():
    model = Model()
    model |= Linear(4, name="c_proj")(input="x")
    model += Linear(4)
    names = [n for n, _ in model._children]
    assert names == ["c_proj", "linear_0"]
    with pytest.raises(ModelConnectionError, match="already exists"):
        model |= Linear(4, name="c_proj")


def test_mlp_both_forms():
    a = MLP(input_size=6, hidden_sizes=[8, 8], output_size=2)
    b = MLP(activations=[Relu(), Relu(), None], dimensions=[8, 8, 2])
    assert a.shapes["output"][-1] == 2 and b.shapes["output"][-1] == 2
    assert a.shapes["input"][-1] == 6


def test_conv2d_weight_layout_is_pytorch():
    conv = Conv2d(out_channels=16, kernel_size=3, in_channels=6, groups=2)
    assert conv.shapes["weight"] == [16, 3, 3, 3]


def test_loss_after_logits_with_unknown_batch_settles_later():
    model = Model()
    model |= MLP(input_size=4, hidden_sizes=[8], output_size=3)(input="input", output=IOKey("logits"))
    model |= CrossEntropy(reduction="mean")(input="logits", target="target", output=IOKey("loss"))
    model.set_shapes(input=[5, 4])
    assert model.shapes["logits"] == [5, 3]
    assert model.shapes["loss"] == []


def test_blocks_have_documented_keys():
    assert LayerNorm().input_keys == ["input", "weight", "bias"]  # Mithril's order: LayerNorm().connect(x) is input
    assert set(MultiHeadAttention(dim=8, num_heads=2).input_keys) >= {"input"}


def test_summary_mentions_children_and_shapes():
    model = Model()
    model |= Linear(4)(input=IOKey("x", shape=[2, 3]))
    model += Relu()
    text = str(model)
    assert "linear_0" in text and "relu_0" in text and "[2, 4]" in text
    assert "trainable parameters: 16" in text


def _state(model):
    return model.shapes, model.input_keys, model.output_keys, [n for n, _ in model._children], str(model)


def test_failed_connection_restores_both_models_exactly():
    model = Model()
    model |= Linear(4)(input=IOKey("x", shape=[2, 3]), output="h")
    before = _state(model)
    add = Add()
    with pytest.raises(ShapeError):
        model |= add(left="h", right=IOKey("z", shape=[5, 5]))
    assert _state(model) == before
    assert add._parent is None and add.shapes == Add().shapes  # the child is untouched and reusable
    model |= add(left="h", right=IOKey("z", shape=[4]), output="y")
    assert model.shapes["y"] == [2, 4]


def test_failed_set_shapes_changes_nothing():
    model = Model()
    model |= Add()(left="a", right="b", output="c")
    before = _state(model)
    with pytest.raises(ShapeError):
        model.set_shapes(a=["N", 4], b=[3, 4], c=[5, 5])  # a and b fit; c conflicts after they were applied
    assert _state(model) == before


def test_errors_found_before_any_change_leave_the_model_usable():
    model = Model()
    model |= Linear(4)(input="x", output="h")
    outside = Model()
    outside |= Relu()(input="a", output="b")
    with pytest.raises(ModelConnectionError, match="outside"):
        model |= Relu()(input=outside.b)
    with pytest.raises(ModelKeyError):
        model |= Relu()(wrong_key="h")
    model |= Relu()(input="h", output="r")  # still fine
    assert "r" in model.output_keys


def test_unknown_initialiser_is_rejected():
    with pytest.raises(ValueError, match="xavier"):
        IOKey("w", init="xavier")


def test_dropout_training_cannot_change_after_it_is_added():
    from mithril.models import Dropout

    drop = Dropout(0.5)
    model = Model()
    model |= drop(input="x", training=False, output="y")
    with pytest.raises(ModelConnectionError, match="before the Dropout is added"):
        drop(training=True)
