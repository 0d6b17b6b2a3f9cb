"""``lowbit quantize --method qqq``: the reference's QQQ recipe (defaults, checkpoint fields) from the flags;
a model whose linears the QQQ kernels cannot hold is refused naming the module, before any work."""

from __future__ import annotations

import pytest
from conftest import run_lowbit
from lowbit.cli.parser import build_parser
from lowbit.cli.quantize_flags import quant_config
from lowbit.errors import UsageError
from qhf.config_view import algorithm, setting
from qhf.quant_config import QuantConfigError, read_quantize_config


def _config(*flags: str) -> dict[str, object]:
    return quant_config(build_parser().parse_args(["quantize", "model", "--out", "out", "--method", "qqq", *flags]))


def test_flags_give_the_qqq_recipe() -> None:
    config = read_quantize_config(_config())
    assert (algorithm(config), config.format, config.bits, config.group_size) == ("qqq", "qqq", 4, 128)
    damping = (setting(config, "damp_percent"), setting(config, "damp_auto_increment"))
    assert (*damping, setting(config, "act_group_aware")) == (0.005, 0.001, False)
    per_channel = read_quantize_config(_config("--group-size", "-1", "--damp-percent", "0.01"))
    assert setting(per_channel, "damp_percent") == 0.01
    with pytest.raises(QuantConfigError, match="group_size"):
        read_quantize_config(_config("--group-size", "64"))
    with pytest.raises(UsageError, match="--method qqq"):
        _config("--gptaq")


def test_unholdable_module_is_named(tiny_llama, tmp_path) -> None:
    out = str(tmp_path / "o")
    ran = run_lowbit("quantize", str(tiny_llama), "--method", "qqq", "--group-size", "-1", "--out", out, "--quiet")
    assert ran.returncode != 0
    assert "model.layers.0.self_attn.k_proj [32 x 64]" in ran.stderr and "divisible by 64" in ran.stderr, ran.stderr
    assert not (tmp_path / "o" / "config.json").exists()
