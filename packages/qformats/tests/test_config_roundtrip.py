"""Property: any valid GPTQ/AWQ config survives write -> read unchanged, dynamic rule order included."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st
from qformats.config import QuantizeConfig, parse_config

PATTERNS = st.lists(
    st.tuples(
        st.sampled_from(["", "+:", "-:"]),
        st.sampled_from([r"model\.layers\.\d+\.mlp", r".*lm_head", r"model\.layers\.1[0-9]\.", r"^embed$", "x"]),
        st.fixed_dictionaries({}, optional={"bits": st.sampled_from([2, 3, 4, 8]), "sym": st.booleans()}),
    ),
    max_size=4,
    unique_by=lambda t: t[0] + t[1],
)


@settings(max_examples=60, deadline=None)
@given(
    fmt=st.sampled_from(["gptq", "gptq_v2", "gptq_p", "gemm", "gemv", "marlin"]),
    bits=st.sampled_from([2, 3, 4, 8]),
    group_size=st.sampled_from([-1, 32, 64, 128]),
    sym=st.booleans(),
    desc_act=st.booleans(),
    lm_head=st.booleans(),
    rules=PATTERNS,
    extra=st.dictionaries(st.sampled_from(["custom_a", "tool_b"]), st.integers(), max_size=2),
)
def test_write_read_identity(
    fmt: str,
    bits: int,
    group_size: int,
    sym: bool,
    desc_act: bool,
    lm_head: bool,
    rules: list[tuple[str, str, dict[str, object]]],
    extra: dict[str, int],
) -> None:
    method = "awq" if fmt in ("gemm", "gemv") else "gptq"
    dynamic = {prefix + pattern: override for prefix, pattern, override in rules}
    cfg = QuantizeConfig(
        bits=bits,
        group_size=group_size,
        sym=sym,
        desc_act=desc_act,
        lm_head=lm_head,
        method=method,
        format=fmt,
        dynamic=dynamic,
        unknown=extra,
    )
    text = json.dumps(cfg.to_dict())
    back = parse_config(json.loads(text))
    assert back == cfg
    assert back.to_dict() == cfg.to_dict()
    if dynamic:
        assert list(json.loads(text)["dynamic"]) == list(dynamic)
