"""QuantSpec rejects bad fields by name."""

from __future__ import annotations

import pytest
from qalgos.errors import QAlgosError, SpecError
from qalgos.spec import QuantSpec


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"bits": 1}, "bits"),
        ({"bits": 9}, "bits"),
        ({"bits": 4, "group_size": 0}, "group_size"),
        ({"bits": 4, "group_size": -2}, "group_size"),
        ({"bits": 4, "damp_percent": 1.0}, "damp_percent"),
        ({"bits": 4, "damp_auto_increment": -0.1}, "damp_auto_increment"),
        ({"bits": 4, "mse": -1.0}, "mse"),
        ({"bits": 4, "block_size": 0}, "block_size"),
        ({"bits": 4, "scale_dtype": "bfloat16"}, "scale_dtype"),
        ({"bits": 4, "desc_act": True, "act_group_aware": True}, "act_group_aware"),
    ],
)
def test_bad_fields_are_named(kwargs: dict, field: str) -> None:
    with pytest.raises(SpecError, match=field) as info:
        QuantSpec(**kwargs)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, QAlgosError)


def test_groups_and_widths() -> None:
    assert QuantSpec(bits=4, group_size=64).groups(200) == 4
    assert QuantSpec(bits=4, group_size=-1).groups(200) == 1
    assert QuantSpec(bits=4, group_size=-1).group_width(200) == 200
    assert QuantSpec(bits=3).maxq == 7
