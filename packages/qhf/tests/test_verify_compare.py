"""verify-after-save's tensor comparison in chunks (``qhf.verify.equal_in_dtype``)."""

from __future__ import annotations

import pytest
import torch
from qhf import verify


def test_equal_in_dtype_compares_every_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify, "COMPARE_CHUNK", 7)  # several chunks and a partial last one
    live = torch.randn(5, 9, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    saved = live.to(torch.float16)
    assert verify.equal_in_dtype(saved, live, torch.float16)
    assert verify.equal_in_dtype(live, saved, torch.bfloat16)  # the reload's view: the file's values in bfloat16
    changed = saved.clone()
    changed[4, 8] += 1  # in the last chunk
    assert not verify.equal_in_dtype(changed, live, torch.float16)
    assert not verify.equal_in_dtype(saved, live.reshape(9, 5), torch.float16)  # same values, other shape
    assert not verify.equal_in_dtype(live, saved, torch.float16)  # the reference must already be in the dtype
