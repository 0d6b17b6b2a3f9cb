"""The gptq layout family (importing this package registers its layouts)."""
