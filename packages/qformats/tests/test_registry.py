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
