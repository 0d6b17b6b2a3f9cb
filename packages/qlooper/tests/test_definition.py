"""Model definitions bind to a model by dotted names; mistakes are errors naming the path."""

import pytest
import torch
from qlooper import DefinitionError, GroupSpec, ModelDefinition
from qlooper.definition import resolve_groups, resolve_layers
from torch import nn
from toy_models import DENSE, MOE, ToyDecoder


def test_resolve_layers_and_groups() -> None:
    model = ToyDecoder()
    layers = resolve_layers(model, DENSE)
    assert [name for name, _ in layers] == [f"model.layers.{i}" for i in range(4)]
    groups = resolve_groups(layers[1][1], layers[1][0], DENSE)
    assert [m.full_name for m in groups[0].modules] == [
        "model.layers.1.self_attn.q_proj",
        "model.layers.1.self_attn.k_proj",
        "model.layers.1.self_attn.v_proj",
    ]
    assert groups[0].prev_op is model.model.layers[1].input_layernorm
    assert groups[0].inspect is model.model.layers[1].self_attn
    assert {m.input_key for m in groups[0].modules} == {"0:shared"}


def test_expert_wildcard_expands_per_expert() -> None:
    model = ToyDecoder(moe=True)
    groups = resolve_groups(model.model.layers[0], "model.layers.0", MOE)
    names = [m.name for m in groups[2].modules]
    assert names[:2] == ["mlp.experts.0.gate_proj", "mlp.experts.0.up_proj"]
    assert len(names) == 8 and groups[2].spec.is_expert_group
    keys = {m.input_key for m in groups[2].modules}
    assert keys == {f"2:expert{e}" for e in range(4)}


def test_missing_path_names_the_missing_child() -> None:
    model = ToyDecoder()
    bad = ModelDefinition(layers_path="model.blocks", groups=DENSE.groups)
    with pytest.raises(DefinitionError, match=r"'model.blocks'.*no child 'blocks'"):
        resolve_layers(model, bad)
    bad_group = ModelDefinition(layers_path="model.layers", groups=(GroupSpec(("self_attn.qkv",)),))
    with pytest.raises(DefinitionError, match="self_attn has no child 'qkv'"):
        resolve_groups(model.model.layers[0], "model.layers.0", bad_group)


def test_optional_group_is_skipped_and_non_linear_rejected() -> None:
    model = ToyDecoder()
    layer = model.model.layers[0]
    d = ModelDefinition("model.layers", (GroupSpec(("mlp.missing",), optional=True), GroupSpec(("mlp.down_proj",))))
    assert [g.modules[0].name for g in resolve_groups(layer, "l0", d)] == ["mlp.down_proj"]
    layer.mlp.down_proj = nn.Identity()
    with pytest.raises(DefinitionError, match=r"l0.mlp.down_proj.*weight \[out, in\], found no weight"):
        resolve_groups(layer, "l0", d)
    layer.mlp.down_proj = nn.LayerNorm(4)
    with pytest.raises(DefinitionError, match=r"weight of shape \(4,\)"):
        resolve_groups(layer, "l0", d)
    assert torch.is_tensor(layer.mlp.down_proj.weight)


def test_definition_validation() -> None:
    with pytest.raises(DefinitionError, match="at least one"):
        GroupSpec(())
    with pytest.raises(DefinitionError, match="two groups"):
        ModelDefinition("model.layers", (GroupSpec(("a",)), GroupSpec(("a",))))
    with pytest.raises(DefinitionError, match="max_length"):
        ModelDefinition("model.layers", (GroupSpec(("a",)),), max_length=0)
    with pytest.raises(DefinitionError, match="unquantized module"):
        resolve_groups(ToyDecoder().model.layers[0], "l0", ModelDefinition("x", DENSE.groups, unquantized=("nope",)))
    assert DENSE.describe()["groups"][1]["prev_op"] == "self_attn.v_proj"
