"""``save`` writes and verifies in a staging directory; only a verified checkpoint replaces the target."""

from __future__ import annotations

import os
import stat

import pytest
import qhf
from qhf.errors import VerificationError
from qhf.verify import VerificationReport


def test_a_failed_verification_leaves_the_previous_checkpoint(tmp_path, tiny_dirs, monkeypatch) -> None:
    qm = qhf.load(tiny_dirs("llama"), {"method": "rtn", "bits": 4, "group_size": 32})
    qm.quantize()
    out = tmp_path / "q"
    old_umask = os.umask(0o022)
    try:
        qm.save(out, verify=False)
    finally:
        os.umask(old_umask)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert "model.safetensors" in before and "tokenizer.json" in before
    assert {stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()} == {0o644}  # not mkstemp's 0600

    def failing(*args, **kwargs) -> VerificationReport:
        return VerificationReport(problems=["forced mismatch"])

    monkeypatch.setattr("qhf.verify.verify_checkpoint", failing)
    with pytest.raises(VerificationError, match="forced mismatch"):
        qm.save(out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".q.lock", "q"]  # no staging directory left
