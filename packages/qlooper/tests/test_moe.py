"""MoE: tokens per expert counted and reported; under-covered experts fall back to RTN by policy, recorded."""

import pytest
from loop_helpers import assert_packed_roundtrip
from qalgos.fallback import FallbackPolicy
from qalgos.spec import QuantSpec
from qlooper import LoopOptions, quantize_model
from toy_models import MOE, ToyDecoder, toy_calibration

SPEC = QuantSpec(bits=4, group_size=32)


@pytest.mark.parametrize("method", ["gptq", "awq"])
def test_expert_tokens_and_fallback(method: str) -> None:
    model = ToyDecoder(moe=True)
    cal = toy_calibration(batch_size=1)  # no padding: routed rows are exactly the calibration tokens
    policy = FallbackPolicy(min_token_fraction=0.05)
    run = quantize_model(model, MOE, cal, SPEC, method, options=LoopOptions(fallback=policy))
    assert len(run.modules) == 4 * (4 + 3 * 4)
    assert_packed_roundtrip(run, model)
    for layer in range(4):
        rows = {r.expert: r for r in run.report if r.layer == layer and r.module.endswith("gate_proj")}
        assert sum(r.tokens for r in rows.values()) == cal.total_tokens  # top-1: every token goes somewhere
        assert rows[3].tokens == 0  # the router never picks expert 3
        assert rows[3].fallback == "rtn" and rows[3].fallback_reason == "no calibration token reached this module"
        for expert, row in rows.items():
            under = row.tokens < 0.05 * cal.total_tokens
            assert (row.fallback == "rtn") == under, (expert, row.tokens)
            if under and row.tokens:
                assert "below the 5% threshold" in row.fallback_reason
        assert rows[0].fallback is None and rows[0].tokens > 0.5 * cal.total_tokens
        attn = run.report_for(f"model.layers.{layer}.self_attn.q_proj")
        assert attn.expert is None and attn.tokens == cal.total_tokens
