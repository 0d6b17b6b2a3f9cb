"""``lowbit quantize --gptaq / --foem / --foem-alpha / --eora-rank`` -> the reference's ``gptaq`` / ``foem``
sections and its ``adapter: {rank}``."""

from __future__ import annotations

import pytest
from lowbit.cli.parser import build_parser
from lowbit.cli.quantize_flags import quant_config
from lowbit.errors import UsageError
from qhf.config_view import adapter, setting, solver_variant
from qhf.quant_config import read_quantize_config


def _config(*flags: str) -> dict[str, object]:
    return quant_config(build_parser().parse_args(["quantize", "model", "--out", "out", *flags]))


def test_flags_become_sections() -> None:
    def variant(*flags: str) -> tuple | None:
        return solver_variant(read_quantize_config(_config(*flags)))

    assert variant("--gptaq") == ("gptaq", {"alpha": 0.25})
    assert variant("--gptaq", "0.5") == ("gptaq", {"alpha": 0.5})
    assert variant("--foem") == ("foem", {"alpha": 0.0, "beta": 0.2})
    assert variant("--foem", "0.1", "--foem-alpha", "0.25") == ("foem", {"alpha": 0.25, "beta": 0.1})
    assert "gptaq" not in _config() and "foem" not in _config() and "adapter" not in _config()
    eora = read_quantize_config(_config("--gptaq", "--eora-rank", "32"))
    assert adapter(eora) == {"name": "lora", "path": "eora", "rank": 32} and setting(eora, "gptaq") == {"alpha": 0.25}


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        (("--gptaq", "--foem"), "choose one"),
        (("--foem-alpha", "0.2"), "only together with --foem"),
        (("--method", "awq", "--gptaq"), "--method awq"),
        (("--method", "fp8", "--foem"), "--foem"),
        (("--method", "awq", "--eora-rank", "8"), "--eora-rank"),
    ],
)
def test_bad_combinations_are_refused(flags: tuple[str, ...], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        _config(*flags)


def test_out_of_range_values_are_refused(capsys) -> None:
    with pytest.raises(SystemExit):
        _config("--gptaq", "1.5")
    assert "expected a number in [0, 1]" in capsys.readouterr().err
