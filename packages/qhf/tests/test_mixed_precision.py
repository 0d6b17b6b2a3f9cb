"""Mixed precision under a bits budget on a tiny llama: the widths become dynamic rules before the loop, the
checkpoint stores each module at its width and every reader agrees; runs are deterministic and a saved config
reproduces its checkpoint; budgets no width choice meets are refused before any work."""

from __future__ import annotations

import json
import re

import pytest
import qhf
import torch
from qformats.checkpoint import Checkpoint
from qformats.config import read_config
from qhf.corpus import bundled_docs
from qhf.errors import BitsBudgetError
from qhf.mixed_precision.rules import unit_patterns
from qhf.mixed_precision.units import Member, Unit
from qhf.quant_config import QuantConfigError, read_quantize_config
from qhf.tokenizer import token_blocks

PROBE = torch.tensor([[0, *range(5, 45)]])
BUDGET = 5.5  # the tiny llama stores 5.07 bits per weight at a uniform 4 bits (group 32): some modules go to 8


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=PROBE, use_cache=False).logits.float()


def _quantize(src, config: dict, out):
    qm = qhf.load(src, config)
    blocks = token_blocks(qm.tokenizer, bundled_docs("calibration").texts, count=4, length=48)
    summary = qm.quantize(blocks)
    return qm, summary, qm.save(out)


@pytest.fixture(scope="module")
def budget_run(tiny_dirs, tmp_path_factory):
    src = tiny_dirs("llama")
    out = tmp_path_factory.mktemp("mixed") / "q"
    qm, summary, saved = _quantize(src, {"method": "gptq", "bits": 4, "group_size": 32, "bits_budget": BUDGET}, out)
    return src, out, qm, summary, saved


def test_budget_run_writes_rules_that_every_reader_follows(budget_run) -> None:
    _, out, qm, summary, saved = budget_run
    record = summary.mixed_precision
    assert record is not None and record["bits_per_weight"] <= BUDGET
    assert record["bits_per_weight"] == pytest.approx(record["stored_bits"] / record["weights"], abs=1e-6)
    widths = record["bits"]
    assert len(widths) == 14 and len(set(widths.values())) > 1 and set(widths.values()) == {4, 8}
    # modules that read one input (q/k/v, gate/up) share one width: engines fuse them
    for layer in (0, 1):
        p = f"model.layers.{layer}."
        assert len({widths[p + f"self_attn.{m}_proj"] for m in "qkv"}) == 1
        assert widths[p + "mlp.gate_proj"] == widths[p + "mlp.up_proj"]

    stored = json.loads((out / "config.json").read_text())["quantization_config"]
    assert stored == json.loads((out / "quantize_config.json").read_text())
    assert stored["dynamic"] and all(key.startswith("+:") for key in stored["dynamic"])
    assert (stored["bits"], stored["bits_budget"], stored["bits_candidates"]) == (4, BUDGET, [4, 8])
    config = read_config(out)  # qformats reads each module's width back
    assert {name: config.for_module(name).bits for name in widths} == widths
    entries = {e.prefix: e for e in Checkpoint(out).modules()}
    assert {name: entries[name].meta.bits for name in widths} == widths
    # what the stored tensors take is what the record counted
    ckpt = Checkpoint(out)
    packed_bits = sum(8 * int(ckpt.load(n).nbytes) for e in ckpt.modules() for n in e.tensors.values())
    assert packed_bits == record["stored_bits"]

    assert saved.verified
    report = json.loads((out / "quant_report.json").read_text())
    assert report["summary"]["mixed_precision"]["bits"] == widths
    assert {row.module: row.bits for row in qm.run.report} == widths
    lm = qhf.load_quantized(out)
    assert torch.equal(_logits(lm), _logits(qm.model))


def test_runs_are_deterministic_and_the_saved_config_reproduces_the_checkpoint(budget_run, tmp_path) -> None:
    src, out, _, summary, _ = budget_run
    _, again, _ = _quantize(src, {"method": "gptq", "bits": 4, "group_size": 32, "bits_budget": BUDGET}, tmp_path / "a")
    assert again.mixed_precision["bits"] == summary.mixed_precision["bits"]
    saved_config = json.loads((out / "quantize_config.json").read_text())
    _, rerun, _ = _quantize(src, saved_config, tmp_path / "b")
    assert (
        rerun.mixed_precision["rules"] == "as given"
        and rerun.mixed_precision["bits"] == summary.mixed_precision["bits"]
    )
    for target in (tmp_path / "a", tmp_path / "b"):
        assert (target / "model.safetensors").read_bytes() == (out / "model.safetensors").read_bytes()
        assert json.loads((target / "quantize_config.json").read_text())["dynamic"] == saved_config["dynamic"]


def test_a_streaming_run_writes_the_in_memory_run_s_bytes(budget_run, tmp_path) -> None:
    src, out, _, summary, _ = budget_run
    qm = qhf.load(src, {"method": "gptq", "bits": 4, "group_size": 32, "bits_budget": BUDGET})
    blocks = token_blocks(qm.tokenizer, bundled_docs("calibration").texts, count=4, length=48)
    streamed = qm.quantize(blocks, keep_in_memory=False, spill_dir=tmp_path)
    saved = qm.save(tmp_path / "s")
    assert saved.verified and streamed.mixed_precision["bits"] == summary.mixed_precision["bits"]
    assert (tmp_path / "s" / "model.safetensors").read_bytes() == (out / "model.safetensors").read_bytes()


def test_a_resumed_budget_run_writes_the_uninterrupted_bytes(budget_run, tmp_path, monkeypatch) -> None:
    from qcheckpoint import CheckpointConfig
    from qlooper.errors import LayerLoadError

    src, out, _, _, _ = budget_run
    config = {"method": "gptq", "bits": 4, "group_size": 32, "bits_budget": BUDGET}
    checkpoint = CheckpointConfig(path=tmp_path / "ckpt", interval="layer:1")
    first = qhf.load(src, config)
    original, loads = first.source.materialize_layer, []

    def failing(index: int) -> int:
        loads.append(index)
        if loads.count(1) == 2:  # layer 1 in the quantization loop (the sensitivity pass read it first)
            raise OSError("disk went away")
        return original(index)

    monkeypatch.setattr(first.source, "materialize_layer", failing)
    blocks = token_blocks(first.tokenizer, bundled_docs("calibration").texts, count=4, length=48)
    with pytest.raises(LayerLoadError):
        first.quantize(blocks, checkpoint=checkpoint)
    resumed = qhf.load(src, config)
    summary = resumed.quantize(blocks, checkpoint=checkpoint)
    assert summary.resumed_from == 1
    resumed.save(tmp_path / "r")
    assert (tmp_path / "r" / "model.safetensors").read_bytes() == (out / "model.safetensors").read_bytes()


def test_rtn_takes_a_budget_from_its_own_sensitivity_pass(tiny_dirs, tmp_path) -> None:
    config = {"method": "rtn", "bits": 4, "group_size": 32, "bits_budget": 4.6, "bits_candidates": [3, 4, 8]}
    _, summary, saved = _quantize(tiny_dirs("llama"), config, tmp_path / "q")
    assert summary.calibration is not None and summary.mixed_precision["sensitivity"]["rows"] == 4
    assert summary.mixed_precision["bits_per_weight"] <= 4.6 and saved.verified
    assert 3 in summary.mixed_precision["bits"].values()  # narrower than the base: listed in bits_candidates


def test_a_budget_no_width_choice_meets_is_refused_before_any_work(tiny_dirs, monkeypatch) -> None:
    import qhf.calibration.run_input as run_input

    def no_calibration(*args, **kwargs):
        raise AssertionError("calibration started before the budget was checked")

    monkeypatch.setattr(run_input, "calibration_input", no_calibration)
    for budget, where in ((2.0, "below"), (9.5, "above")):
        qm = qhf.load(tiny_dirs("llama"), {"method": "gptq", "bits": 4, "group_size": 32, "bits_budget": budget})
        with pytest.raises(BitsBudgetError, match=rf"bits_budget: {budget} bits per weight is {where}"):
            qm.quantize()
        assert qm.results is None


def test_given_rules_are_checked_against_the_budget(tiny_dirs) -> None:
    config = {"method": "gptq", "bits": 4, "group_size": 32, "bits_budget": 5.0, "dynamic": {r"+:.*mlp": {"bits": 8}}}
    with pytest.raises(BitsBudgetError, match=r"the config's dynamic rules store 7\.\d+ bits per weight, above"):
        qhf.load(tiny_dirs("llama"), config).quantize()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"method": "awq", "bits_budget": 4.25}, "method 'awq' cannot take a budget"),
        ({"method": "rtn", "format": "gemm", "bits_budget": 4.25}, "format 'gemm' cannot take per-module widths"),
        ({"method": "gptq", "bits_budget": 4.25, "bits_candidates": [3, 5]}, r"stores \[2, 3, 4, 8\]-bit codes"),
        ({"method": "gptq", "bits_candidates": [3, 4]}, "bits_candidates: only used with bits_budget"),
        ({"method": "gptq", "bits_budget": -1}, "bits_budget: expected a positive number"),
        ({"method": "gguf", "bits_budget": 4.25}, "method 'gguf' cannot take a budget"),
    ],
)
def test_settings_are_checked_when_the_config_is_read(config: dict, message: str) -> None:
    with pytest.raises(QuantConfigError, match=message):
        read_quantize_config(config)


def test_settings_resolve_and_stay_out_of_configs_without_a_budget() -> None:
    cfg = read_quantize_config({"method": "gptq", "bits_budget": 4.25, "bits_candidates": [8, 3, 4]})
    assert cfg.settings["bits_candidates"] == [3, 4, 8]

    def default(bits: int) -> list[int]:
        return read_quantize_config({"bits": bits, "bits_budget": 4.25}).settings["bits_candidates"]

    defaults = {b: default(b) for b in (2, 3, 4)}
    assert defaults == {2: [2, 3, 4, 8], 3: [3, 4, 8], 4: [4, 8]}  # the base and wider: a budget never narrows
    planar = read_quantize_config({"method": "gptq", "format": "gptq_p", "bits_budget": 4.25, "bits_candidates": [5]})
    assert planar.settings["bits_candidates"] == [5]
    plain = read_quantize_config({"method": "gptq"})
    assert "bits_budget" not in plain.settings and "bits_budget" not in plain.to_dict()


def test_the_sensitivity_pass_ranks_widths_and_leaves_the_model_as_it_was(tiny_dirs) -> None:
    from qhf.looper_bridge import layer_modules
    from qhf.mixed_precision.sensitivity import SensitivityProcessor
    from qhf.spec_from_config import quant_spec
    from qlooper.api import quantize_model
    from qlooper.calibration import prepare_calibration
    from qlooper.loop import LoopOptions

    qm = qhf.load(tiny_dirs("llama"), {"method": "gptq", "bits": 4, "group_size": 32, "bits_budget": BUDGET})
    model = qm.source.materialize_all()
    model.config.use_cache = False
    before = {k: v.clone() for k, v in model.state_dict().items()}
    blocks = token_blocks(qm.tokenizer, bundled_docs("calibration").texts, count=2, length=48)
    processor = SensitivityProcessor(quant_spec(qm.config), (2, 3, 4, 8))
    run = quantize_model(model, qm.source.definition, prepare_calibration(blocks), None, processor, format="gptq",
                         options=LoopOptions(lockstep=True))  # fmt: skip
    assert not run.modules  # nothing was quantized
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert set(processor.errors) == {name for name, _ in layer_modules(qm.source)}
    for name, ratios in processor.errors.items():
        assert 1 > ratios[2] > ratios[3] > ratios[4] > ratios[8] > 0, name


def test_rule_patterns_match_the_members_and_the_names_engines_fuse_them_under() -> None:
    layer = [
        f"model.layers.3.{m}"
        for m in (
            *("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"),
            *("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"),
        )
    ]

    def unit(*names: str) -> Unit:
        return Unit("u", 3, tuple(Member(n, 8, 8) for n in names))

    qkv = unit(*layer[:3])
    [pattern] = unit_patterns(qkv, layer)
    matched = [n for n in [*layer, "model.layers.3.self_attn.qkv_proj", "model.layers.31.self_attn.q_proj"]
               if re.match(pattern, n)]  # fmt: skip
    assert matched == [*layer[:3], "model.layers.3.self_attn.qkv_proj"]
    [pattern] = unit_patterns(unit(*layer[4:6]), layer)
    assert re.match(pattern, "model.layers.3.mlp.gate_up_proj") and not re.match(pattern, layer[6])
    assert unit_patterns(unit(layer[3]), layer) == [r"model\.layers\.3\.self_attn\.o_proj$"]
    experts = [f"model.layers.3.mlp.experts.{e}.{m}_proj" for e in range(2) for m in ("gate", "up", "down")]
    [pattern] = unit_patterns(unit(*experts), experts)
    assert re.match(pattern, "model.layers.3.mlp.experts") and all(re.match(pattern, n) for n in experts)
