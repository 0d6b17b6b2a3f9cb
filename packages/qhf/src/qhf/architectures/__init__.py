"""Model definitions discovered from the model (qlooper ``ModelDefinition``), with hand-written overrides."""

from .catalog import OVERRIDES, Override, definition_for, overridden_model_types
from .discovery import Discovery, discover, find_layers
from .fused_experts import UnfusedExperts, unfuse_experts

__all__ = [
    "OVERRIDES",
    "Discovery",
    "Override",
    "UnfusedExperts",
    "definition_for",
    "discover",
    "find_layers",
    "overridden_model_types",
    "unfuse_experts",
]
