"""Which serving engines can load a checkpoint, and the exact rule that fails when one cannot (pure rules).

``check_engines(facts)`` gives one :class:`Verdict` per engine kernel of :data:`KERNELS` (vLLM's gptq,
gptq_marlin, machete, exllama, awq, awq_marlin; transformers with GPT-QModel's torch_aten, torch, marlin,
exllamav2, awq_gemm; llama.cpp); ``plan_target`` adjusts settings for one ``ENGINE[:KERNEL]`` or refuses;
``loads_lora_adapter(target)`` says whether the target applies a LoRA adapter saved beside the checkpoint.
No engine is imported: the rules are data, with their sources cited in docs/engines.md.
"""

from .catalog import ENGINES, KERNELS, EngineKernel
from .facts import CheckpointFacts, LinearShape
from .from_checkpoint import facts_from_settings, facts_from_summary
from .report import RuleFailure, Verdict, check_engines, check_kernel, format_report
from .target import EngineTargetError, TargetPlan, kernels_for, loads_lora_adapter, plan_target

__all__ = [
    "ENGINES",
    "KERNELS",
    "CheckpointFacts",
    "EngineKernel",
    "EngineTargetError",
    "LinearShape",
    "RuleFailure",
    "TargetPlan",
    "Verdict",
    "check_engines",
    "check_kernel",
    "facts_from_settings",
    "facts_from_summary",
    "format_report",
    "kernels_for",
    "loads_lora_adapter",
    "plan_target",
]
