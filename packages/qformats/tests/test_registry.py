"""The layout registry: GPTQ layouts present, duplicates refused, unknown keys named."""

from __future__ import annotations

import pytest
from qformats.enums import FORMAT
from qformats.errors import DuplicateRegistrationError, UnsupportedLayoutError
from qformats.layouts.registry import get_layout, register_layout, registered_layouts


def test_gptq_layouts_registered_under_enum_values() -> None:
    keys = registered_layouts()
    for fmt in (FORMAT.GPTQ, FORMAT.GPTQ_V2, FORMAT.GPTQ_P):
        assert fmt.value in keys
        assert get_layout(fmt).key == fmt.value


def test_duplicate_registration_is_an_error() -> None:
    with pytest.raises(DuplicateRegistrationError, match="gptq_v2"):
        register_layout(get_layout("gptq_v2"))


def test_unknown_layout_is_named() -> None:
    with pytest.raises(UnsupportedLayoutError, match=r"'nope'.*known:.*gptq"):
        get_layout("nope")


def test_every_builtin_key_is_registered_and_nothing_else() -> None:
    from qformats.layouts.registry import BUILTIN_KEYS

    assert registered_layouts() == tuple(sorted(BUILTIN_KEYS))
    assert get_layout("awq_marlin").key == "awq_marlin"


def test_optional_members_have_defaults() -> None:
    from qformats.layouts.registry import DEFAULT_MARKER, marker_tensor, meta_inference

    class Bare:
        key = "bare"

    bare = Bare()
    assert marker_tensor(bare) == DEFAULT_MARKER  # type: ignore[arg-type]
    assert meta_inference(bare) is None  # type: ignore[arg-type]
    assert marker_tensor(get_layout("pack-quantized")) == "weight_packed"
    infer = meta_inference(get_layout("gptq"))
    assert infer is not None and infer.__name__ == "infer_meta"
    assert meta_inference(get_layout("gguf")) is None
