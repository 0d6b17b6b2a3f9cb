"""Built-in backends; each module registers its quantized linear class on import."""
