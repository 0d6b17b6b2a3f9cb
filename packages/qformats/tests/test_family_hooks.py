"""The weight-family records own their modules' hooks: tensor names, checkpoint meta / checks / reading, the
weight-only summaries, the scalar bridges and the options a config gives (issue 37)."""

from __future__ import annotations

import numpy as np
import pytest
from family_checkpoints import PREFIXES, build_family
from qformats.checkpoint import Checkpoint
from qformats.checkpoint.family_modules import entry_family
from qformats.errors import TranscodeError
from qformats.family_transcode import family_source_weight, pack_family
from qformats.layouts.families import (
    get_family,
    marked_modules,
    registered_families,
    scalar_family_keys,
    stored_family_keys,
)
from qformats.layouts.registry import LayoutMeta
from qformats.transcode import TRANSCODE_LAYOUTS


def test_every_family_has_the_hooks_of_its_kind() -> None:
    assert stored_family_keys() == ("qqq", "paroquant", "vptq", "exl3")
    assert scalar_family_keys() == ("qqq", "paroquant")
    assert TRANSCODE_LAYOUTS[-2:] == ("qqq", "paroquant")
    for family in registered_families():
        if family.key == "integer":
            assert family.stored is family.summary is family.scalar is family.quantize is None
            continue
        assert (family.stored is None) == family.weight_only, family.key  # listed modules or summarized ones
        assert (family.summary is not None) == family.weight_only, family.key
        assert (family.quantize is not None) == family.weight_only, family.key
        assert (family.quantize_options is not None) == family.weight_only, family.key
        assert family.zeros, family.key  # inspect's zero-point note


def test_owns_tells_module_tensors_from_bias_and_strangers() -> None:
    vptq, fp8 = get_family("vptq"), get_family("fp8")
    assert vptq.owns("centroids.weight") and vptq.owns("indices") and not vptq.owns("bias")
    assert fp8.owns("weight") and fp8.owns("weight_scale_inv") and not fp8.owns("bias")
    assert not fp8.owns("weight.extra")  # weight-only module tensors hold no dot


def test_marked_modules_groups_dotted_names_by_the_families_markers() -> None:
    names = [
        "m.a.indices",
        "m.a.centroids.weight",
        "m.a.bias",
        "m.b.weight",
        "m.b.weight_scale_inv",
        "m.b.bias",
        "m.norm.weight",
    ]
    assert marked_modules((get_family("vptq"),), names) == {
        "m.a": {"indices": "m.a.indices", "centroids.weight": "m.a.centroids.weight"}
    }
    assert marked_modules((get_family("fp8"),), names) == {
        "m.b": {"weight": "m.b.weight", "weight_scale_inv": "m.b.weight_scale_inv"}
    }


@pytest.mark.parametrize("key", ["qqq", "paroquant", "vptq", "exl3"])
def test_a_stored_family_checkpoint_is_listed_checked_and_read_through_its_record(tmp_path, key) -> None:
    dense = build_family(tmp_path, key)
    ck = Checkpoint(tmp_path, shapes={p: (128, 128) for p in PREFIXES})
    entries = ck.modules()
    assert [e.prefix for e in entries] == sorted(PREFIXES)
    assert ck.validate() == {}
    for entry in entries:
        assert entry_family(entry) is get_family(key)
        np.testing.assert_array_equal(ck.dense(entry), dense[entry.prefix])


def test_a_family_without_a_scalar_bridge_is_refused_by_name() -> None:
    meta = LayoutMeta(2, -1, 128, 128)
    with pytest.raises(TranscodeError, match=r"'vptq' has no exact scalar bridge; bridged: \('qqq', 'paroquant'\)"):
        family_source_weight({}, "vptq", meta)
    with pytest.raises(TranscodeError, match="no weight family registered as 'nope'"):
        pack_family(None, "nope")  # type: ignore[arg-type]


def test_shape_problems_come_from_the_family() -> None:
    from qformats.config import QuantizeConfig

    qqq = get_family("qqq").shape_problem
    paro = get_family("paroquant").shape_problem
    fp8 = get_family("fp8").shape_problem
    assert qqq is not None and paro is not None and fp8 is not None
    assert get_family("integer").shape_problem is None and get_family("gguf").shape_problem is None
    config = QuantizeConfig(bits=4, group_size=128)
    assert qqq(config, 128, 256) is None
    assert qqq(config, 32, 64) == (
        " [32 x 64] at group 128: the QQQ kernels need in_features and out_features divisible by 64; found in=64, "
        "out=32"
    )
    assert paro(config, 64, 256) is None
    assert paro(config, 64, 576) == (
        " [64 x 576]: group_size: ParoQuant rotates groups of an even size dividing in_features=576; found 128"
    )
    block = QuantizeConfig(bits=8, group_size=-1, settings={"weight_block_size": [48, 48]})
    assert fp8(block, 96, 96) is None
    assert fp8(block, 64, 96) == ": weight_block_size [48, 48] must divide [out, in] = [64, 96]"
