"""Rotations folded into the weights: the folded float64 model computes the source's logits, a fold that does not
verify (Gemma 3's sandwich norms) is refused by name, and the setting is read and checked."""

from __future__ import annotations

from pathlib import Path

import pytest
import qhf
import torch
from qhf.errors import RotationError
from qhf.quant_config import QuantConfigError, read_quantize_config
from qhf.rotation import install_rotation, prepare_rotation, resolve_rotation
from qhf.source import open_source
from tiny_models import save_tiny_model

PROBE = torch.tensor([[0, *range(5, 45)]])
AUTO = {"kind": "hadamard", "seed": 0, "residual": "auto", "heads": "auto"}


def float64_norms(model: torch.nn.Module, offset: float) -> None:
    """Make every RMS norm of ``model`` compute in its input dtype (transformers' cast to float32 would hide
    float64 agreement behind float32 rounding)."""
    for module in model.modules():
        if type(module).__name__.endswith("RMSNorm"):
            eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))

            def forward(x: torch.Tensor, m: torch.nn.Module = module, eps: float = eps) -> torch.Tensor:
                return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (offset + m.weight)

            module.forward = forward  # type: ignore[method-assign]


def _logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=PROBE, use_cache=False).logits


def _folded(directory: Path, setting: dict) -> tuple[torch.Tensor, torch.Tensor, dict, qhf.source.OpenedSource]:
    """Logits of the source and of the folded model (both float64, norms in float64) and the run's record."""
    from transformers import AutoModelForCausalLM

    reference = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float64).eval()
    source = open_source(directory, torch.float64)
    prepared = prepare_rotation(source, setting)
    install_rotation(source, prepared)
    folded = source.materialize_all()
    offset = source.definition.norm_weight_offset
    float64_norms(reference, offset)
    float64_norms(folded, offset)
    return _logits(reference), _logits(folded), prepared.record, source


@pytest.mark.parametrize(
    ("model_type", "overrides"),
    [("llama", {}), ("qwen2", {}), ("qwen3", {}), ("mistral", {}), ("llama", {"tie_word_embeddings": True})],
    ids=["llama", "qwen2-biases", "qwen3-qk-norm", "mistral", "llama-tied"],
)
def test_a_folded_rotation_keeps_the_float64_logits(tmp_path, tokenizer, model_type: str, overrides: dict) -> None:
    directory = save_tiny_model(tmp_path, model_type, tokenizer=tokenizer, norms=0.2, **overrides)
    expected, got, record, source = _folded(directory, AUTO)
    assert record["residual"] is True and record["heads"] is True and "refused" not in record
    assert record["matrices"] == {
        "residual": {"size": 64, "kind": "hadamard", "construction": "sylvester 64"},
        "head": {"size": 16, "kind": "hadamard", "construction": "sylvester 16"},
    }
    assert float((got - expected).abs().max()) <= 1e-10 * float(expected.abs().max())
    model = source.model
    assert torch.equal(model.model.norm.weight, torch.ones(64, dtype=torch.float64))  # folded into lm_head
    assert torch.equal(model.model.layers[1].input_layernorm.weight, torch.ones(64, dtype=torch.float64))
    original = open_source(directory, torch.float64)
    for name in ("model.embed_tokens.weight", "model.layers.0.self_attn.o_proj.weight", "lm_head.weight"):
        assert not torch.allclose(source.tensor(name), original.tensor(name), atol=1e-3), name  # really rotated
    if overrides.get("tie_word_embeddings"):
        assert record["untied_embeddings"] is True and not source.tied
        assert model.lm_head.weight is not model.model.embed_tokens.weight
        assert source.config.tie_word_embeddings is False and "lm_head.weight" in source.tensor_names()
    else:
        assert "untied_embeddings" not in record


def test_a_random_orthogonal_rotation_stands_in_where_no_hadamard_construction_exists(tmp_path, tokenizer) -> None:
    # hidden 172 and head_dim 10: no Sylvester/Paley order; 4 query heads share 2 KV heads
    directory = save_tiny_model(tmp_path, "llama", tokenizer=tokenizer, norms=0.2, hidden_size=172, head_dim=10)
    expected, got, record, _ = _folded(directory, AUTO)
    assert record["matrices"] == {
        "residual": {"size": 172, "kind": "random", "construction": "gaussian qr"},
        "head": {"size": 10, "kind": "random", "construction": "gaussian qr"},
    }
    assert float((got - expected).abs().max()) <= 1e-10 * float(expected.abs().max())


def test_gemma3_refuses_the_residual_rotation_by_name_and_keeps_its_value_output_rotation(tmp_path, tokenizer) -> None:
    directory = save_tiny_model(tmp_path, "gemma3_text", tokenizer=tokenizer, norms=0.2)
    expected, got, record, source = _folded(directory, AUTO)
    assert record["residual"] is False and record["heads"] is True
    reason = record["refused"]["residual"]
    assert "post_attention_layernorm.weight, post_feedforward_layernorm.weight" in reason
    assert float((got - expected).abs().max()) <= 1e-10 * float(expected.abs().max())
    assert set(source.transform.plan) == {  # type: ignore[union-attr]
        f"model.layers.{i}.self_attn.{m}_proj.weight" for i in range(2) for m in ("v", "o")
    }
    qm = qhf.load(directory, {"method": "rtn", "bits": 4, "group_size": 16, "rotation": {"residual": True}})
    with pytest.raises(RotationError, match=r"rotation\.residual: .*post_feedforward_layernorm\.weight"):
        qm.quantize()
    assert qm.results is None


def test_the_rotation_setting_is_resolved_and_checked() -> None:
    assert resolve_rotation(None) == resolve_rotation("none") == {"kind": "none"}
    assert resolve_rotation("hadamard") == {"kind": "hadamard", "seed": 0, "residual": "auto", "heads": "auto"}
    assert resolve_rotation({"kind": "random", "seed": 3, "heads": False})["heads"] is False
    cases = [
        ({"kind": "spun"}, r"rotation\.kind"),
        ({"kind": "hadamard", "seed": -1}, r"rotation\.seed"),
        ({"kind": "hadamard", "seed": True}, r"rotation\.seed"),
        ({"kind": "hadamard", "residual": 1}, r"rotation\.residual"),
        ({"kind": "hadamard", "residual": False, "heads": False}, r"kind 'none'"),
        ({"kind": "hadamard", "axis": 0}, r"unknown keys \['axis'\]"),
        (7, r"rotation: expected a kind"),
    ]
    for value, match in cases:
        with pytest.raises(QuantConfigError, match=match):
            resolve_rotation(value)
    config = read_quantize_config({"method": "gptq", "rotation": {"kind": "hadamard", "seed": 2}})
    assert config.settings["rotation"]["seed"] == 2 and read_quantize_config(config) == config
    assert read_quantize_config({"method": "gptq"}).settings["rotation"] == {"kind": "none"}
    with pytest.raises(QuantConfigError, match=r"rotation: .*'fp8'"):
        read_quantize_config({"method": "fp8", "rotation": "hadamard"})


def test_a_saved_record_is_read_back_as_the_setting() -> None:
    from qhf.checkpoint_config import checkpoint_dict

    record = {"kind": "hadamard", "seed": 5, "residual": False, "heads": True, "matrices": {}, "refused": {"r": "x"}}
    saved = checkpoint_dict(read_quantize_config({"method": "gptq"}), rotation=record)
    assert saved["meta"]["rotation"] == record
    again = read_quantize_config(saved)
    assert again.settings["rotation"] == {"kind": "hadamard", "seed": 5, "residual": False, "heads": True}
    assert "rotation" not in checkpoint_dict(read_quantize_config({"method": "gptq"}))["meta"]
