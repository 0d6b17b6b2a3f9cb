"""A streaming quantization run stopped part-way: the resume tests' common first step."""

from __future__ import annotations

from typing import Any

import pytest
import qhf


def interrupt_at_layer(qm: qhf.QuantModel, calibration: Any, checkpoint: Any, monkeypatch: Any, layer: int) -> None:
    """Run ``qm.quantize(calibration, checkpoint=, keep_in_memory=False)`` with the source failing to read decoder
    layer ``layer`` (an ``OSError``), so the run stops there with qlooper's ``LayerLoadError`` after writing its
    last checkpoint."""
    from qlooper.errors import LayerLoadError

    original = qm.source.materialize_layer

    def failing(index: int) -> int:
        if index == layer:
            raise OSError("disk went away")
        return original(index)

    monkeypatch.setattr(qm.source, "materialize_layer", failing)
    with pytest.raises(LayerLoadError):
        qm.quantize(calibration, checkpoint=checkpoint, keep_in_memory=False)
