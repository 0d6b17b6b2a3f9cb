"""The engines and kernels the compatibility report knows, each with its load rules and where they come from.

Numbers are the engines' own declared constraints (see docs/engines.md for the cited source files):
vLLM's quantization methods and mixed-precision kernels, GPT-QModel 7.7.0's quant-linear classes
(``SUPPORTS_*`` declarations; what transformers uses to run GPTQ checkpoints), and llama.cpp's input format.
Hardware requirements (CUDA compute capability, CPU instruction sets) are stated in ``requires``; they
are not checkpoint properties and are not checked. ``lora`` says how a kernel applies a PEFT LoRA adapter saved
beside the checkpoint (lowbit's EoRA ``eora/``), with its source; empty where it does not.
"""

from __future__ import annotations

from dataclasses import dataclass

from .rules import (
    BitsIn,
    DtypeIn,
    FormatIn,
    GGUFFileOnly,
    GroupSizeIn,
    InDivisible,
    InDivisibleByGroup,
    OutDivisible,
    OutDivisibleByPackFactor,
    Rule,
    SymOnly,
)

VLLM = "vllm"
GPTQMODEL = "transformers+gptqmodel"
LLAMA_CPP = "llama.cpp"

GPTQ_FORMATS = ("gptq", "gptq_v2")
HALF = ("float16",)
HALF_OR_BF16 = ("float16", "bfloat16")
MARLIN_GROUPS = (-1, 32, 64, 128)


#: How vLLM applies a LoRA adapter beside any of its quantized linear methods, and the source.
VLLM_LORA = (
    "PEFT directory (adapter_config.json + adapter_model.safetensors, keys base_model.model.<module>.lora_A/B.weight) "
    "passed as --enable-lora --lora-modules NAME=DIR (a rank above 16 needs --max-lora-rank); source: vLLM "
    "vllm/lora/ (LoRAModel.from_local_checkpoint, PEFTHelper, utils.parse_fine_tuned_lora_name; worker_manager "
    "refuses 'LoRA rank R is greater than max_lora_rank', default 16; its LoRA layers wrap the base layer's quant "
    "method), examples/offline_inference/lora_with_quantization_inference.py (GPTQ and AWQ bases)"
)
#: How GPT-QModel 7.7.0 applies one: its loader reads the config's ``adapter: {name: lora, path, rank}`` itself.
GPTQMODEL_LORA = (
    "the checkpoint's quantization config adapter: {name: lora, path, rank}, read by GPTQModel.load (PEFT files in "
    "path/); source: gptqmodel 7.7.0 nn_modules/qlinear/*.py SUPPORTS_ADAPTERS = [Lora], adapter/adapter.py "
    "(Lora: adapter_model.safetensors, adapter_config.json, prefix base_model.model.)"
)


@dataclass(frozen=True)
class EngineKernel:
    """``engine`` and ``kernel`` names (``vllm`` / ``gptq_marlin`` ...), the ``rules`` a checkpoint must meet,
    the hardware it ``requires`` (not checked), the ``source`` of the rules and ``lora``: how the kernel applies a
    PEFT LoRA adapter saved beside the checkpoint, with its source (empty: it does not)."""

    engine: str
    kernel: str
    rules: tuple[Rule, ...]
    requires: str
    source: str
    lora: str = ""

    @property
    def loads_lora(self) -> bool:
        """Whether the kernel applies a LoRA adapter (lowbit's EoRA ``eora/``) beside the checkpoint."""
        return bool(self.lora)

    @property
    def key(self) -> str:
        return f"{self.engine}:{self.kernel}"


KERNELS: tuple[EngineKernel, ...] = (
    EngineKernel(
        VLLM,
        "gptq",
        (
            FormatIn(GPTQ_FORMATS),
            BitsIn((2, 3, 4, 8)),
            InDivisibleByGroup(),
            OutDivisibleByPackFactor(),
            DtypeIn(HALF),
        ),
        "CUDA",
        "vllm/model_executor/layers/quantization/gptq.py (GPTQConfig, GPTQLinearMethod.create_weights)",
        lora=VLLM_LORA,
    ),
    EngineKernel(
        VLLM,
        "gptq_marlin",
        (
            FormatIn(GPTQ_FORMATS),
            BitsIn((4, 8)),
            SymOnly(),
            GroupSizeIn(MARLIN_GROUPS),
            OutDivisible(64),
            InDivisible(128),
            InDivisibleByGroup(below_k_only=True),
            DtypeIn(HALF_OR_BF16),
        ),
        "CUDA compute capability >= 7.5",
        "vllm/model_executor/layers/quantization/utils/marlin_utils.py (MARLIN_SUPPORTED_GROUP_SIZES, "
        "GPTQ_MARLIN_MIN_THREAD_N/K, verify_marlin_supports_shape)",
        lora=VLLM_LORA,
    ),
    EngineKernel(
        VLLM,
        "machete",
        (
            FormatIn(GPTQ_FORMATS),
            BitsIn((4, 8)),
            SymOnly(),
            GroupSizeIn((-1, 64, 128)),
            InDivisible(64),
            OutDivisible(128),
            DtypeIn(HALF_OR_BF16),
        ),
        "CUDA compute capability 9.0 (Hopper)",
        "vllm/model_executor/layers/quantization/utils/machete_utils.py (MACHETE_PREPACKED_BLOCK_SHAPE, "
        "query_machete_supported_group_sizes), kernels/mixed_precision/machete.py",
        lora=VLLM_LORA,
    ),
    EngineKernel(
        VLLM,
        "exllama",
        (
            FormatIn(GPTQ_FORMATS),
            BitsIn((4, 8)),
            SymOnly(),
            OutDivisibleByPackFactor(),
            InDivisibleByGroup(),
            DtypeIn(HALF),
        ),
        "CUDA compute capability >= 6.0",
        "vllm/model_executor/layers/quantization/kernels/mixed_precision/exllama.py (ExllamaLinearKernel)",
        lora=VLLM_LORA,
    ),
    EngineKernel(
        VLLM,
        "awq",
        (FormatIn(("gemm",)), BitsIn((4,)), InDivisibleByGroup(), OutDivisibleByPackFactor(), DtypeIn(HALF)),
        "CUDA",
        "vllm/model_executor/layers/quantization/awq.py (AWQConfig, AWQLinearMethod.create_weights)",
        lora=VLLM_LORA,
    ),
    EngineKernel(
        VLLM,
        "awq_marlin",
        (
            FormatIn(("gemm",)),
            BitsIn((4,)),
            GroupSizeIn(MARLIN_GROUPS),
            OutDivisible(64),
            InDivisible(128),
            InDivisibleByGroup(below_k_only=True),
            DtypeIn(HALF_OR_BF16),
        ),
        "CUDA compute capability >= 7.5",
        "vllm/model_executor/layers/quantization/awq_marlin.py, utils/marlin_utils.py "
        "(query_marlin_supported_quant_types with zero points: uint4 only)",
        lora=VLLM_LORA,
    ),
    EngineKernel(
        GPTQMODEL,
        "torch_aten",
        (
            FormatIn(GPTQ_FORMATS),
            BitsIn((4,)),
            GroupSizeIn((32, 64, 128, 256)),
            InDivisibleByGroup(),
            DtypeIn(HALF_OR_BF16),
        ),
        "CPU with aten::_weight_int4pack_mm_for_cpu (GPT-QModel's first choice on CPU)",
        "gptqmodel 7.7.0 nn_modules/qlinear/torch_aten_kernel.py (TorchAtenLinear.SUPPORTS_*; the aten op "
        "requires K divisible by the group size: 'expect K to be divisible by qGroupSize')",
        lora=GPTQMODEL_LORA,
    ),
    EngineKernel(
        GPTQMODEL,
        "torch",
        (
            FormatIn((*GPTQ_FORMATS, "gptq_p")),
            BitsIn((2, 3, 4, 5, 6, 7, 8)),
            GroupSizeIn((-1, 16, 32, 64, 128, 256, 512, 1024), full_k=True),
            DtypeIn(HALF_OR_BF16),
        ),
        "any device",
        "gptqmodel 7.7.0 nn_modules/qlinear/torch.py (TorchLinear.SUPPORTS_*)",
        lora=GPTQMODEL_LORA,
    ),
    EngineKernel(
        GPTQMODEL,
        "marlin",
        (
            FormatIn((*GPTQ_FORMATS, "marlin")),
            BitsIn((4, 8)),
            SymOnly(),
            GroupSizeIn(MARLIN_GROUPS, full_k=True),
            DtypeIn(HALF_OR_BF16),
        ),
        "CUDA",
        "gptqmodel 7.7.0 nn_modules/qlinear/marlin.py (MarlinLinear.SUPPORTS_*)",
        lora=GPTQMODEL_LORA,
    ),
    EngineKernel(
        GPTQMODEL,
        "exllamav2",
        (
            FormatIn(GPTQ_FORMATS),
            BitsIn((4,)),
            GroupSizeIn(MARLIN_GROUPS, full_k=True),
            InDivisible(32),
            OutDivisible(32),
            DtypeIn(HALF_OR_BF16),
        ),
        "CUDA",
        "gptqmodel 7.7.0 nn_modules/qlinear/exllamav2.py (ExllamaV2Linear.SUPPORTS_*)",
        lora=GPTQMODEL_LORA,
    ),
    EngineKernel(
        GPTQMODEL,
        "awq_gemm",
        (FormatIn(("gemm",)), BitsIn((4,)), GroupSizeIn((-1, 16, 32, 64, 128), full_k=True), DtypeIn(HALF_OR_BF16)),
        "CUDA",
        "gptqmodel 7.7.0 nn_modules/qlinear/gemm_awq.py (AwqGEMMLinear.SUPPORTS_*)",
        lora=GPTQMODEL_LORA,
    ),
    EngineKernel(
        LLAMA_CPP,
        "gguf",
        (GGUFFileOnly(),),
        "CPU or GPU",
        "llama.cpp reads GGUF files (llama_model_load); convert_hf_to_gguf.py does not take GPTQ/AWQ inputs",
    ),
)
ENGINES = tuple(dict.fromkeys(k.engine for k in KERNELS))
