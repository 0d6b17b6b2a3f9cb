"""The fp8 layout family (importing this package registers its layouts)."""
