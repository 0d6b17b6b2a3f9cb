"""The terminal tables: per-layer folding of qhf's module rows, sizes, cell formatting."""

from __future__ import annotations

from lowbit.cli.report_tables import human_bytes, per_layer_rows, render_table


def test_per_layer_rows_sum_loss_take_max_tokens_and_damp_and_list_fallbacks() -> None:
    rows = [
        {"layer": 0, "module": "model.layers.0.self_attn.q_proj", "loss": 0.5, "samples": 100, "damp": 0.05,
         "fallback": None, "seconds": 1.0},
        {"layer": 0, "module": "model.layers.0.mlp.experts.3.up_proj", "loss": 0.25, "samples": 7, "damp": 0.06,
         "fallback": "rtn", "seconds": 0.5},
        {"layer": 1, "module": "model.layers.1.self_attn.q_proj", "loss": None, "samples": None, "damp": None,
         "fallback": None, "seconds": None},
    ]  # fmt: skip
    assert per_layer_rows(rows) == [
        [0, 2, 0.75, 100, 0.06, "up_proj: rtn", 1.5],
        [1, 1, None, None, None, "none", 0.0],
    ]


def test_render_table_aligns_and_prints_missing_values_as_dashes() -> None:
    text = render_table(("a", "value"), [[1, None], [22, 0.123456]])
    assert text.splitlines() == ["a   value", "--  ------", "1   -", "22  0.1235"]


def test_human_bytes_uses_decimal_units() -> None:
    assert [human_bytes(n) for n in (999, 1000, 98_362_432, 2.5e9)] == ["999 B", "1.0 KB", "98.4 MB", "2.5 GB"]
