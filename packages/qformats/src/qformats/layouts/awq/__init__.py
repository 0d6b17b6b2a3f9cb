"""The awq layout family (importing this package registers its layouts)."""
