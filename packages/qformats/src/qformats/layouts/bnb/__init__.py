"""The bnb layout family (importing this package registers its layouts)."""
