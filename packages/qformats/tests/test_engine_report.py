"""The engine report over the catalog, target plans, and facts read from a written checkpoint."""

from __future__ import annotations

import pytest
from checkpoint_fixtures import build
from qformats.engines import (
    KERNELS,
    CheckpointFacts,
    EngineTargetError,
    LinearShape,
    check_engines,
    facts_from_summary,
    format_report,
    kernels_for,
    loads_lora_adapter,
    plan_target,
)
from qformats.engines.facts import GGUF
from qformats.inspect import inspect

SMOLLM2 = tuple(
    LinearShape(f"model.layers.0.{name}", k, n)
    for name, k, n in [
        ("self_attn.q_proj", 576, 576),
        ("self_attn.k_proj", 576, 192),
        ("self_attn.v_proj", 576, 192),
        ("self_attn.o_proj", 576, 576),
        ("mlp.gate_proj", 576, 1536),
        ("mlp.up_proj", 576, 1536),
        ("mlp.down_proj", 1536, 576),
    ]
)
QUICKSTART = CheckpointFacts("gptq", 4, 128, True, False, "float16", SMOLLM2)
GPTQ_FORMATS = ("gptq", "gptq_v2", "gptq_p")


def _verdicts(facts: CheckpointFacts) -> dict[str, object]:
    return {v.kernel.key: v for v in check_engines(facts)}


def test_catalog_keys_are_unique_and_every_rule_has_text() -> None:
    keys = [k.key for k in KERNELS]
    assert len(keys) == len(set(keys))
    assert {"vllm:gptq", "vllm:gptq_marlin", "vllm:machete", "vllm:exllama", "vllm:awq", "vllm:awq_marlin"} <= set(keys)
    assert all(k.source and rule.rule for k in KERNELS for rule in k.rules)


def test_smollm2_group_128_is_refused_where_the_engines_refuse_it() -> None:
    verdicts = _verdicts(QUICKSTART)
    for key in ("vllm:gptq", "vllm:exllama", "transformers+gptqmodel:torch_aten"):
        assert not verdicts[key].loads
        assert any("K=576 not divisible by group_size 128" in f.reason for f in verdicts[key].failures)
    assert not verdicts["vllm:gptq_marlin"].loads  # K % 128 tile as well
    assert not verdicts["vllm:machete"].loads  # N=576 not a multiple of 128
    assert verdicts["transformers+gptqmodel:torch"].loads
    assert not verdicts["llama.cpp:gguf"].loads
    text = format_report(check_engines(QUICKSTART))
    assert "vllm:gptq " in text and "transformers+gptqmodel:torch " in text


def test_group_64_makes_smollm2_loadable_by_vllm_gptq_and_gptqmodel_cpu() -> None:
    verdicts = _verdicts(QUICKSTART.changed(group_size=64))
    assert verdicts["vllm:gptq"].loads and verdicts["vllm:exllama"].loads
    assert verdicts["transformers+gptqmodel:torch_aten"].loads
    assert not verdicts["vllm:gptq_marlin"].loads  # K=576 is not a multiple of marlin's 128 tile


def test_a_gguf_file_is_loaded_by_llama_cpp_only_and_the_rest_name_the_container() -> None:
    facts = QUICKSTART.changed(format="gguf", group_size=32, sym=False, dtype=None, container=GGUF)
    verdicts = _verdicts(facts)
    assert [key for key, v in verdicts.items() if v.loads] == ["llama.cpp:gguf"]
    for key, verdict in verdicts.items():
        if key != "llama.cpp:gguf":  # one reason, not the tensor rules of a file the kernel never opens
            assert [f.reason for f in verdict.failures] == [
                "reads safetensors checkpoint directories; a single .gguf file is not one"
            ], key


def test_float32_dtype_is_a_note_not_a_refusal() -> None:
    verdict = _verdicts(QUICKSTART.changed(group_size=64, dtype="float32"))["vllm:gptq"]
    assert verdict.loads and [f.blocking for f in verdict.failures] == [False]


def test_plan_adjusts_group_size_to_the_largest_that_fits() -> None:
    plan = plan_target(QUICKSTART, "vllm:gptq", formats=GPTQ_FORMATS)
    assert plan.changes == {"group_size": (128, 64)} and plan.kernel.key == "vllm:gptq"


def test_plan_for_an_engine_picks_the_kernel_needing_fewest_changes() -> None:
    facts = QUICKSTART.changed(group_size=64, sym=False, dtype="float32")
    plan = plan_target(facts, "vllm", formats=GPTQ_FORMATS)
    assert plan.kernel.key == "vllm:gptq" and plan.changes == {"dtype": ("float32", "float16")}


def test_plan_turns_sym_as_the_kernel_needs_and_keeps_act_order() -> None:
    shapes = (LinearShape("m", 1024, 1024),)
    facts = CheckpointFacts("gptq", 4, 128, False, True, "bfloat16", shapes)
    plan = plan_target(facts, "vllm:gptq_marlin", formats=GPTQ_FORMATS)
    assert plan.changes == {"sym": (False, True)}  # marlin takes act-order and bfloat16
    assert plan_target(facts.changed(sym=True), "vllm:gptq_marlin").changes == {}


def test_plan_refuses_what_settings_cannot_fix() -> None:
    with pytest.raises(EngineTargetError, match=r"vllm:machete: .*N=576 not divisible by 128"):
        plan_target(QUICKSTART, "vllm:machete", formats=GPTQ_FORMATS)
    with pytest.raises(EngineTargetError, match=r"bits 3 not in \{4, 8\}"):
        plan_target(QUICKSTART.changed(bits=3, group_size=64), "vllm:gptq_marlin", formats=GPTQ_FORMATS)


def test_unknown_target_lists_the_known_ones() -> None:
    with pytest.raises(EngineTargetError, match=r"'tgi'.*engines: vllm, transformers\+gptqmodel, llama\.cpp"):
        kernels_for("tgi")
    assert [k.kernel for k in kernels_for("llama.cpp")] == ["gguf"]


def test_lora_adapters_load_in_vllm_and_gptqmodel_not_in_llama_cpp() -> None:
    assert loads_lora_adapter("vllm") and loads_lora_adapter("vllm:gptq") and loads_lora_adapter("vllm:machete")
    assert loads_lora_adapter("transformers+gptqmodel") and loads_lora_adapter("transformers+gptqmodel:torch")
    assert not loads_lora_adapter("llama.cpp") and not loads_lora_adapter("llama.cpp:gguf")
    cited = [k for k in KERNELS if k.loads_lora]
    assert {k.engine for k in cited} == {"vllm", "transformers+gptqmodel"}
    assert all("source:" in k.lora for k in cited)
    with pytest.raises(EngineTargetError, match=r"'tgi'.*engines: vllm"):
        loads_lora_adapter("tgi")


def test_facts_from_a_written_checkpoint(tmp_path) -> None:
    build(tmp_path / "ck", layout="gptq", sym=True, layers=2)
    facts = facts_from_summary(inspect(tmp_path / "ck"))
    assert (facts.format, facts.bits, facts.group_size, facts.sym, facts.desc_act) == ("gptq", 4, 32, True, False)
    assert len(facts.modules) == 2 and facts.dtype is None
    assert {(m.in_features, m.out_features) for m in facts.modules} == {(128, 64)}
