"""Tiny vision-language models built from transformers' own config classes (no hub), and image+text inputs.

Each family: a 2-layer, hidden-64 language model (grouped-query attention, the tiny tokenizer's 320 tokens plus 4
image tokens 320..323 that text never produces) beside a 2-layer, hidden-32 vision tower on 28x28 images (56x56
for Mistral 3; 14-pixel patches). Random weights, seeded; the language model's projections are drawn larger (as in
:mod:`tiny_models`) so that quantization error shows in the logits, and matrices transformers initializes to
zero are drawn too so that the image reaches the text.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tiny_models import TEXT_FIELDS, VOCAB

IMAGE, START, END, EXTRA = VOCAB, VOCAB + 1, VOCAB + 2, VOCAB + 3
TEXT: dict[str, Any] = dict(TEXT_FIELDS, vocab_size=VOCAB + 4)
VISION: dict[str, Any] = dict(hidden_size=32, num_attention_heads=2, image_size=28, patch_size=14)


def qwen2_5_vl() -> Any:
    from transformers import Qwen2_5_VLConfig

    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=14)
    return Qwen2_5_VLConfig(
        text_config=dict(TEXT, rope_scaling={"type": "mrope", "mrope_section": [2, 2, 4]}),
        vision_config=dict(vision, spatial_merge_size=2, temporal_patch_size=2, fullatt_block_indexes=[1]),
        image_token_id=IMAGE,
        vision_start_token_id=START,
        vision_end_token_id=END,
        video_token_id=EXTRA,
    )


def qwen2_vl() -> Any:
    from transformers import Qwen2VLConfig

    vision = dict(depth=2, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2, patch_size=14)
    return Qwen2VLConfig(
        text_config=dict(TEXT, rope_scaling={"type": "mrope", "mrope_section": [2, 2, 4]}),
        vision_config=dict(vision, spatial_merge_size=2, temporal_patch_size=2),
        image_token_id=IMAGE,
        vision_start_token_id=START,
        vision_end_token_id=END,
        video_token_id=EXTRA,
    )


def qwen3_vl() -> Any:
    from transformers import Qwen3VLConfig

    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=14)
    rope = {"rope_type": "default", "mrope_section": [2, 2, 4], "mrope_interleaved": True}
    return Qwen3VLConfig(
        text_config=dict(TEXT, head_dim=16, rope_scaling=rope),
        vision_config=dict(
            vision,
            spatial_merge_size=2,
            temporal_patch_size=2,
            num_position_embeddings=16,
            deepstack_visual_indexes=[1],
        ),
        image_token_id=IMAGE,
        vision_start_token_id=START,
        vision_end_token_id=END,
        video_token_id=EXTRA,
    )


def mistral3() -> Any:
    """Mistral 3: a Mistral language model and a Pixtral vision tower (56x56 images: 2x2 tokens after the
    patch merger)."""
    from transformers import Mistral3Config

    return Mistral3Config(
        text_config=dict(TEXT, model_type="mistral", head_dim=16),
        vision_config=dict(
            VISION, model_type="pixtral", image_size=56, intermediate_size=64, num_hidden_layers=2, head_dim=16
        ),
        image_token_index=IMAGE,
        spatial_merge_size=2,
    )


def gemma3() -> Any:
    """Gemma 3 with vision; its own config ties ``lm_head`` to the embedding (the text config does not)."""
    from transformers import Gemma3Config

    return Gemma3Config(
        text_config=dict(TEXT, head_dim=16, sliding_window=32),
        vision_config=dict(VISION, intermediate_size=64, num_hidden_layers=2),
        mm_tokens_per_image=4,
        image_token_index=IMAGE,
        boi_token_index=START,
        eoi_token_index=END,
    )


def llama4() -> Any:
    """Llama 4 with vision: MoE text layers (4 experts, 1 per token, a shared expert), ``lm_head`` inside
    ``language_model``."""
    from transformers import Llama4Config

    text = dict(TEXT, intermediate_size_mlp=128, num_local_experts=4, num_experts_per_tok=1, head_dim=16)
    return Llama4Config(
        text_config=dict(text, interleave_moe_layer_step=1),
        vision_config=dict(
            VISION,
            intermediate_size=128,  # the pixel-shuffled width: hidden / ratio**2
            num_hidden_layers=2,
            vision_output_dim=64,
            projector_input_dim=64,
            projector_output_dim=64,
            pixel_shuffle_ratio=0.5,
        ),
        image_token_index=IMAGE,
        boi_token_index=START,
        eoi_token_index=END,
    )


def llava(vision_layers: int = 2) -> Any:
    """LLaVA: a Llama language model and a CLIP vision tower of ``vision_layers`` layers."""
    from transformers import LlavaConfig

    return LlavaConfig(
        text_config=dict(TEXT, model_type="llama"),
        vision_config=dict(
            VISION, model_type="clip_vision_model", intermediate_size=64, num_hidden_layers=vision_layers
        ),
        image_token_index=IMAGE,
    )


FAMILIES: dict[str, Callable[[], Any]] = {
    "qwen2_vl": qwen2_vl,
    "qwen2_5_vl": qwen2_5_vl,
    "qwen3_vl": qwen3_vl,
    "gemma3": gemma3,
    "llama4": llama4,
    "llava": llava,
    "mistral3": mistral3,
}


def save_vision_model(directory: Path, config: Any, tokenizer: Any, seed: int = 0) -> Path:
    """The model of ``config`` with random weights (seeded) saved by transformers with ``tokenizer``."""
    from transformers import AutoModelForImageTextToText

    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "language_model" in name and name.endswith("proj.weight"):
                param.normal_(0.0, 0.08)
            elif param.dim() > 1 and not param.any():  # Gemma 3's projector starts at zero: no image would show
                param.normal_(0.0, 0.08)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def image_text_inputs(config: Any, seed: int = 0) -> dict[str, torch.Tensor]:
    """One row: 3 text tokens, the image's placeholder tokens, 3 text tokens; random pixels (seeded) in the
    layout the family's forward takes (Qwen-VL: flattened patches, ``image_grid_thw`` and ``mm_token_type_ids``;
    Mistral 3: ``image_sizes``)."""
    generator = torch.Generator().manual_seed(seed)
    text = [5, 6, 7]
    vision = config.vision_config
    if config.model_type in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl"):
        grid = torch.tensor([[1, 4, 4]])
        patches = int(grid.prod())
        width = 3 * vision.temporal_patch_size * vision.patch_size**2
        pixels = torch.randn(patches, width, generator=generator)
        ids = torch.tensor([text + [START] + [IMAGE] * (patches // vision.spatial_merge_size**2) + [END] + text])
        image = (ids == IMAGE).long()
        return {"input_ids": ids, "pixel_values": pixels, "image_grid_thw": grid, "mm_token_type_ids": image}
    side = vision.image_size
    pixels = torch.randn(1, 3, side, side, generator=generator)
    patches = (side // vision.patch_size) ** 2  # LLaVA: one token per patch
    if config.model_type == "gemma3":
        patches = config.mm_tokens_per_image
    elif config.model_type == "llama4":
        patches = int(patches * vision.pixel_shuffle_ratio**2)
    elif config.model_type == "mistral3":
        patches //= config.spatial_merge_size**2
        ids = torch.tensor([text + [IMAGE] * patches + text])
        return {"input_ids": ids, "pixel_values": pixels, "image_sizes": torch.tensor([[side, side]])}
    return {"input_ids": torch.tensor([text + [IMAGE] * patches + text]), "pixel_values": pixels}


def save_llava_processor(directory: Path, tokenizer: Any) -> Any:
    """A LLaVA processor (CLIP image processor on 28x28 images, the tiny tokenizer plus ``<image>`` as token
    :data:`IMAGE`) saved in ``directory`` (``processor_config.json`` and the tokenizer)."""
    import copy

    from transformers import CLIPImageProcessor, LlavaProcessor

    text = copy.deepcopy(tokenizer)
    text.add_special_tokens({"additional_special_tokens": ["<image>"]})
    if text.convert_tokens_to_ids("<image>") != IMAGE:
        raise AssertionError(f"<image> is token {text.convert_tokens_to_ids('<image>')}, expected {IMAGE}")
    images = CLIPImageProcessor(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28})
    processor = LlavaProcessor(
        image_processor=images, tokenizer=text, patch_size=14, vision_feature_select_strategy="default",
        image_token="<image>", num_additional_image_tokens=1,
    )  # fmt: skip
    processor.save_pretrained(directory)
    return processor
