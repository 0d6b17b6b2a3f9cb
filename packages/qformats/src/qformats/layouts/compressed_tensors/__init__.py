"""compressed-tensors checkpoints (llm-compressor's output) read as an input format.

Importing this package registers the ``pack-quantized`` layout. :mod:`.config` reads the
``quantization_config`` compressed-tensors writes into ``config.json`` and :mod:`.directory` opens a
whole checkpoint directory; both are pure numpy, like the rest of qformats.
"""

from __future__ import annotations

from ..registry import register_layout
from .layout import KEY, PACK_QUANTIZED, PackQuantizedLayout

register_layout(PACK_QUANTIZED)

__all__ = ["KEY", "PACK_QUANTIZED", "PackQuantizedLayout"]
