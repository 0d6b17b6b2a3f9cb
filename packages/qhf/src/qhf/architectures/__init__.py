"""Model definitions for real architectures (data only), chosen from ``config.model_type``."""

from .catalog import DEFINITIONS, definition_for, supported_model_types
from .definition import ArchitectureDefinition, CalcGroup

__all__ = ["DEFINITIONS", "ArchitectureDefinition", "CalcGroup", "definition_for", "supported_model_types"]
