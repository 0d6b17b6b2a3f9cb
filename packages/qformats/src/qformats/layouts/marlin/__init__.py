"""The marlin layout family (importing this package registers its layouts)."""
