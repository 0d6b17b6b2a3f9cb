"""The gguf layout family (importing this package registers its layouts)."""
