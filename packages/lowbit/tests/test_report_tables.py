"""The terminal tables: per-layer folding of the run's module rows, sizes, cell formatting."""

from __future__ import annotations

from typing import Any

from lowbit.cli.report_tables import human_bytes, per_layer_rows, render_table, rotation_text
from qlooper.report import ModuleReport


def _row(layer: int, module: str, loss: float | None, tokens: int, damp: float | None, **kw: Any) -> ModuleReport:
    fields = {"fallback": None, "fallback_reason": None, "seconds": 0.0, **kw}
    return ModuleReport(layer, module, "gptq", "gptq", 4, 128, loss, tokens, damp, None, **fields)


def test_per_layer_rows_sum_loss_take_max_tokens_and_damp_and_list_fallbacks() -> None:
    rows = [
        _row(0, "model.layers.0.self_attn.q_proj", 0.5, 100, 0.05, seconds=1.0),
        _row(0, "model.layers.0.mlp.experts.3.up_proj", 0.25, 7, 0.06, fallback="rtn", seconds=0.5),
        _row(0, "model.layers.0.mlp.experts.4.up_proj", 0.0, 0, None, fallback="rtn", fallback_reason="no tokens"),
        _row(1, "model.layers.1.self_attn.q_proj", None, 0, None),
    ]
    assert per_layer_rows(rows) == [
        [0, 3, 0.75, 100, 0.06, "up_proj: rtn; up_proj: no tokens", 1.5],
        [1, 1, None, 0, None, "none", 0.0],
    ]


def test_render_table_aligns_and_prints_missing_values_as_dashes() -> None:
    text = render_table(("a", "value"), [[1, None], [22, 0.123456]])
    assert text.splitlines() == ["a   value", "--  ------", "1   -", "22  0.1235"]


def test_human_bytes_uses_decimal_units() -> None:
    assert [human_bytes(n) for n in (999, 1000, 98_362_432, 2.5e9)] == ["999 B", "1.0 KB", "98.4 MB", "2.5 GB"]


def test_rotation_text_names_the_matrices_an_untied_head_and_what_was_left_out() -> None:
    record = {
        "kind": "hadamard", "seed": 2, "residual": False, "heads": True,
        "matrices": {"head": {"size": 64, "kind": "hadamard", "construction": "sylvester 64"}},
        "refused": {"residual": "model.layers.0: post_feedforward_layernorm.weight"},
    }  # fmt: skip
    assert rotation_text(record) == (
        "hadamard seed 2: head 64 (sylvester 64); residual left out: model.layers.0: post_feedforward_layernorm.weight"
    )
    residual = {"size": 172, "kind": "random", "construction": "gaussian qr"}
    untied = {"kind": "random", "seed": 0, "matrices": {"residual": residual}, "untied_embeddings": True}
    assert rotation_text(untied) == "random seed 0: residual 172 (gaussian qr); lm_head untied from the embedding"
