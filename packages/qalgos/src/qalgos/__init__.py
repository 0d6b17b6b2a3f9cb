"""Quantization algorithms: RTN, GPTQ, AWQ and weight-only quantizers.

Every integer quantizer takes torch tensors and returns a :class:`QuantResult` whose ``weight`` is a
``qformats.logical.QuantizedWeight``. Modules: ``qalgos.rtn``, ``qalgos.gptq``, ``qalgos.awq``,
``qalgos.fallback``; the spec is ``qalgos.spec.QuantSpec``.
"""

from .awq import ScaledGroupResult, ScaleSearchResult, quantize_awq, quantize_scaled_group, search_scales
from .awq_clip import search_clip
from .errors import NumericalError, QAlgosError, ShapeError, SpecError, StateError
from .fallback import FallbackPolicy
from .gptq import GPTQ
from .result import QuantResult
from .rtn import quantize_rtn
from .spec import QuantSpec

__version__ = "0.1.0"

__all__ = [
    "GPTQ",
    "FallbackPolicy",
    "NumericalError",
    "QAlgosError",
    "QuantResult",
    "QuantSpec",
    "ScaleSearchResult",
    "ScaledGroupResult",
    "ShapeError",
    "SpecError",
    "StateError",
    "__version__",
    "quantize_awq",
    "quantize_rtn",
    "quantize_scaled_group",
    "search_clip",
    "search_scales",
]
