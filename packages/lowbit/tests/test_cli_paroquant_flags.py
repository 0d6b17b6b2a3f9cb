"""``lowbit quantize --method paroquant [--krot N] [--paro-epochs ROT,FT]`` -> the reference's ``krot`` and
``opt_*_epochs`` fields; the flags refuse other methods and malformed values."""

from __future__ import annotations

import pytest
from lowbit.cli.parser import build_parser
from lowbit.cli.quantize_flags import quant_config
from lowbit.errors import UsageError
from qhf.paroquant_settings import paro_spec
from qhf.quant_config import read_quantize_config


def _config(*flags: str) -> dict[str, object]:
    return quant_config(build_parser().parse_args(["quantize", "model", "--out", "out", *flags]))


def test_flags_become_reference_fields() -> None:
    config = _config("--method", "paroquant", "--group-size", "64", "--krot", "4", "--paro-epochs", "10,0")
    assert config["krot"] == 4 and (config["opt_rotation_epochs"], config["opt_finetune_epochs"]) == (10, 0)
    spec = paro_spec(read_quantize_config(config))
    assert (spec.krot, spec.group_size, spec.rotation_epochs, spec.finetune_epochs) == (4, 64, 10, 0)
    assert paro_spec(read_quantize_config(_config("--method", "paroquant"))).rotation_epochs == 2


def test_bad_flags_are_refused() -> None:
    with pytest.raises(UsageError, match="--method gptq"):
        _config("--krot", "4")
    with pytest.raises(UsageError, match="--krot"):
        _config("--method", "fp8", "--krot", "4")
    with pytest.raises(SystemExit):
        _config("--method", "paroquant", "--paro-epochs", "10")
