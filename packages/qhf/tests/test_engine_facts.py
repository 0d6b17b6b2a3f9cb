"""The engine facts of a run, gathered before any work: settings, dense dtype, every linear to quantize."""

from __future__ import annotations

import qhf
from qhf.engine_facts import planned_facts


def test_planned_facts_list_every_quantized_linear_before_any_work(tiny_dirs) -> None:
    qm = qhf.load(tiny_dirs("llama"), {"method": "gptq", "bits": 4, "group_size": 32, "desc_act": True})
    facts = planned_facts(qm, "float16")
    assert (facts.format, facts.bits, facts.group_size, facts.desc_act, facts.dtype) == ("gptq", 4, 32, True, "float16")
    assert len(facts.modules) == 2 * 7  # 2 layers x q, k, v, o, gate, up, down
    down = next(m for m in facts.modules if m.name == "model.layers.1.mlp.down_proj")
    config = qm.source.config
    assert (down.in_features, down.out_features) == (config.intermediate_size, config.hidden_size)
