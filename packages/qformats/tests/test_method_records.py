"""The records that answer qformats' method and family questions (issue 37: no comparison with a method or family
name outside them): :class:`qformats.config.quantizer_formats.QuantizerFormats` and the weight-family fields."""

from __future__ import annotations

import pytest
from qformats.checkpoint.modules import marlin_label_layout
from qformats.config.quantizer_formats import (
    QUANTIZER_FORMATS,
    RECORDS,
    formats_without_g_idx,
    marlin_layout,
    quantizer,
)
from qformats.gguf_file import GGUFFileError
from qformats.gguf_file.directory_export import ExportReport, directory_tensors
from qformats.layouts.families import family_for_config, get_family, layout_kinds, registered_families


def test_a_solver_variant_has_its_base_methods_record_and_a_stored_only_method_none() -> None:
    assert quantizer("gptaq") is quantizer("awq_gptq") is quantizer("gptq")
    assert quantizer("exl3") is None
    assert [r.method for r in RECORDS] == list(QUANTIZER_FORMATS)


def test_only_awqs_layouts_cannot_hold_a_g_idx() -> None:
    assert formats_without_g_idx() == frozenset(QUANTIZER_FORMATS["awq"])
    assert not formats_without_g_idx() & set(QUANTIZER_FORMATS["gptq"])


@pytest.mark.parametrize(
    ("method", "tiled"), [("awq", "awq_marlin"), ("gptq", "marlin"), ("rtn", "marlin"), ("qqq", "marlin")]
)
def test_a_tiled_marlin_checkpoint_reads_with_its_methods_marlin_layout(method: str, tiled: str) -> None:
    assert marlin_layout(method) == tiled
    # a g_idx_sort_indices tensor marks a tiled file: the method's record picks the layout
    assert marlin_label_layout(method, {"g_idx_sort_indices": "x"}, {}, 4) == tiled


def test_the_layout_based_family_is_the_integer_one() -> None:
    assert [f.key for f in registered_families() if f.layout_based] == ["integer"]
    assert layout_kinds() == frozenset({"integer"})


@pytest.mark.parametrize(("fmt", "bits"), [("nf4", (4,)), ("fp4", (4,)), ("int8", (8,))])
def test_a_bitsandbytes_format_selects_the_family_that_stores_its_width(fmt: str, bits: tuple[int, ...]) -> None:
    assert family_for_config("bitsandbytes", fmt).stored_bits == bits


def test_gguf_blocks_and_the_vptq_bfloat16_codebook_are_family_fields() -> None:
    assert [f.key for f in registered_families() if f.gguf_blocks] == ["gguf"]
    assert get_family("vptq").bfloat16_compute_tensor == "centroids.weight"
    assert not any(f.bfloat16_compute_tensor for f in registered_families() if f.key != "vptq")


@pytest.mark.parametrize("method", ["fp8", "bitsandbytes"])
def test_a_weight_only_checkpoint_without_gguf_blocks_is_refused_by_the_gguf_export(tmp_path, method: str) -> None:
    with pytest.raises(GGUFFileError, match=f"quantization method '{method}': only integer"):
        list(directory_tensors(tmp_path, {"quant_method": method}, ExportReport("directory")))
