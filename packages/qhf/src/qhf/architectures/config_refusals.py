"""Config settings under which a model's own forward cannot run on quantized modules, refused before any work.

RWKV with ``rescale_every > 0`` divides its ``attention.output`` and ``feed_forward.value`` weights in place
(``weight.div_``) on its first inference forward, and halves the hidden state every ``rescale_every`` blocks
to keep float16 in range. A quantized module has no float ``weight`` to divide, so the saved model would fail
on its first forward; with ``rescale_every = 0`` (float32 or bfloat16 inference) the model runs unchanged
and quantizes.
"""

from __future__ import annotations

from typing import Any

from ..errors import UnsupportedArchitectureError


def refuse_in_place_rescale(config: Any) -> None:
    """Raise :class:`UnsupportedArchitectureError` when ``config`` asks the forward to rescale weights in place."""
    every = getattr(config, "rescale_every", None)
    if isinstance(every, int) and every > 0:
        raise UnsupportedArchitectureError(
            f"config.rescale_every = {every}: the model ({getattr(config, 'model_type', '?')}) divides its linear "
            "weights in place on its first inference forward, which quantized modules cannot do; set "
            "rescale_every to 0 in config.json to quantize it"
        )
