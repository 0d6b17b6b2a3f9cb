"""The engine report's verdict for GPT-QModel's CPU kernel (torch_aten) against what GPT-QModel 7.7.0 does.

lowbit writes a float16 GPTQ checkpoint; the report predicts whether ``transformers+gptqmodel:torch_aten``
loads it; GPT-QModel then loads it with that backend and runs a forward. Where the report says it loads,
the logits match lowbit's; where it names ``K % group_size``, GPT-QModel's forward fails on the same rule.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from cases import assert_logits_close
from lowbit_side import lowbit_logits
from tiny_llama import PROBE, save_tiny_llama

KERNEL = "transformers+gptqmodel:torch_aten"


def _quantize(source: Path, out: Path, group_size: int) -> dict[str, object]:
    import qhf
    from qformats.engines import check_engines, facts_from_summary
    from qformats.inspect import inspect

    qm = qhf.load(source, {"method": "rtn", "bits": 4, "group_size": group_size, "sym": True})
    qm.quantize()
    qm.save(out, dtype="float16")
    return {v.kernel.key: v for v in check_engines(facts_from_summary(inspect(out)))}


def _reference_logits(path: Path) -> torch.Tensor:
    from gptqmodel import GPTQModel

    model = GPTQModel.load(str(path), backend="gptq_torch_aten", device="cpu", dtype=torch.float16)
    kernels = {type(m).__name__ for m in model.model.modules() if hasattr(m, "qweight")}
    assert kernels == {"TorchAtenLinear"}, kernels
    with torch.no_grad():
        return model.model(input_ids=PROBE, use_cache=False).logits.float()


def test_report_says_loads_and_gptqmodel_loads(tmp_path: Path, tiny_source: Path) -> None:
    verdicts = _quantize(tiny_source, tmp_path / "g32", 32)  # K = 64 and 128: multiples of 32
    assert verdicts[KERNEL].loads and not verdicts[KERNEL].failures
    assert_logits_close(lowbit_logits(tmp_path / "g32"), _reference_logits(tmp_path / "g32"))


def test_report_names_k_divisibility_and_gptqmodel_fails_on_it(tmp_path: Path) -> None:
    source = save_tiny_llama(tmp_path / "k96", hidden_size=96)  # K = 96 is not a multiple of group 64
    verdicts = _quantize(source, tmp_path / "g64", 64)
    assert not verdicts[KERNEL].loads
    assert any("K=96 not divisible by group_size 64" in f.reason for f in verdicts[KERNEL].failures)
    with pytest.raises(RuntimeError, match="expect K to be divisible by qGroupSize, got K:96, qGroupSize:64"):
        _reference_logits(tmp_path / "g64")
