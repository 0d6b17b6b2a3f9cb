"""The GPTQ visiting orders, checked on hand-made Hessian diagonals (shapes as in SmolLM2: 576 = 4.5 x 128)."""

from __future__ import annotations

import torch
from qalgos.column_order import plan_columns
from qalgos.spec import QuantSpec


def test_group_aware_order_visits_full_groups_by_max_then_the_tail_in_natural_order() -> None:
    """GPT-QModel 7.7.0's order: full groups by descending max diag(H), columns inside by descending
    diag(H); a partial last group stays last and unsorted, however large its diagonal."""
    diag = torch.zeros(10)
    diag[0:4] = torch.tensor([1.0, 3.0, 2.0, 0.5])  # group 0, max 3
    diag[4:8] = torch.tensor([4.0, 0.1, 5.0, 0.2])  # group 1, max 5
    diag[8:10] = torch.tensor([1.0, 9.0])  # partial group 2: the largest entry, still visited last
    plan = plan_columns(diag, QuantSpec(bits=4, group_size=4, act_group_aware=True))
    assert plan.perm.tolist() == [6, 4, 7, 5, 1, 2, 0, 3, 8, 9]
    assert plan.g_idx().tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]  # natural groups are kept
    assert [s[2] for s in plan.segments] == [1, 0, 2]


def test_group_aware_order_without_a_partial_group_has_no_tail() -> None:
    diag = torch.tensor([0.0, 1.0, 7.0, 2.0])
    plan = plan_columns(diag, QuantSpec(bits=4, group_size=2, act_group_aware=True))
    assert plan.perm.tolist() == [2, 3, 1, 0]


def test_desc_act_groups_follow_the_visiting_order() -> None:
    diag = torch.tensor([1.0, 4.0, 3.0, 2.0])
    plan = plan_columns(diag, QuantSpec(bits=4, group_size=2, desc_act=True))
    assert plan.perm.tolist() == [1, 2, 3, 0]
    assert plan.g_idx().tolist() == [1, 0, 0, 1]
