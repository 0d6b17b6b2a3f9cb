"""A run the machine cannot hold is refused before any work, naming the estimate and what is available."""

from __future__ import annotations

import pytest
import qhf
import qhf.resources as resources
from qhf.errors import InsufficientResourcesError
from qhf.resources import model_sizes, run_ram_bytes, wants_streaming


def test_sizes_come_from_the_skeleton_shapes(tiny_dirs) -> None:
    qm = qhf.load(tiny_dirs("llama"), {"method": "gptq", "bits": 4, "group_size": 32})
    sizes = model_sizes(qm.source)
    layers = [p for n, p in qm.model.named_parameters() if n.startswith("model.layers.")]
    assert sizes.layers == sum(p.numel() * 4 for p in layers)  # float32 compute dtype
    assert sizes.largest_layer == sizes.layers // qm.source.num_layers  # identical layers
    assert sizes.linear_weights == sum(p.numel() for p in layers if p.dim() == 2)
    assert sizes.hidden == qm.source.config.hidden_size and sizes.base > 0
    streaming, kept = run_ram_bytes(sizes, 4, 1000, True), run_ram_bytes(sizes, 4, 1000, False)
    assert kept - streaming == sizes.linear_weights * 12 // 8  # codes + packed words of every layer
    assert not wants_streaming(qm.source, "auto")  # far below STREAM_ABOVE_BYTES


def test_too_little_ram_is_refused_before_calibration(tiny_dirs, monkeypatch) -> None:
    qm = qhf.load(tiny_dirs("llama"), {"method": "gptq", "bits": 4, "group_size": 32})
    monkeypatch.setattr(resources, "available_ram", lambda: 1000)
    calibrated: list[object] = []
    monkeypatch.setattr("qhf.calibration.run_input.calibration_input", lambda *a, **k: calibrated.append(a))
    refused = r"needs an estimated .* GiB of RAM \(MemAvailable\) but 0\.00 GiB"
    with pytest.raises(InsufficientResourcesError, match=refused):
        qm.quantize()
    assert calibrated == [] and qm.results is None


def test_too_little_disk_for_the_spill_is_refused(tiny_dirs, tmp_path, monkeypatch) -> None:
    qm = qhf.load(tiny_dirs("llama"), {"method": "rtn", "bits": 4, "group_size": 32})
    monkeypatch.setattr(resources, "available_disk", lambda path: 10)
    with pytest.raises(InsufficientResourcesError, match="disk at the spill area"):
        qm.quantize(keep_in_memory=False, spill_dir=tmp_path)
    assert qm.results is None


def test_too_little_disk_for_the_checkpoint_is_refused_before_writing(tiny_dirs, tmp_path, monkeypatch) -> None:
    qm = qhf.load(tiny_dirs("llama"), {"method": "rtn", "bits": 4, "group_size": 32})
    qm.quantize()
    seen: list[str] = []

    def free(path) -> int:
        seen.append(str(path))
        return 100

    monkeypatch.setattr(resources, "available_disk", free)
    with pytest.raises(InsufficientResourcesError, match=r"save .*out: the run needs an estimated .* of disk"):
        qm.save(tmp_path / "out")
    assert seen == [str(tmp_path / "out")]
    assert not (tmp_path / "out").exists()


def test_meminfo_and_disk_readers_report_this_machine(tmp_path) -> None:
    ram = resources.available_ram()
    assert ram is None or ram > 0
    assert resources.available_disk(tmp_path / "not" / "yet") > 0  # the nearest existing ancestor


def test_a_folded_rotation_counts_its_replica_untied_head_and_working_set(tiny_dirs) -> None:
    from qhf.resources import rotation_sizes

    qm = qhf.load(tiny_dirs("llama"), {"method": "gptq", "bits": 4, "group_size": 32, "rotation": "hadamard"})
    sizes = model_sizes(qm.source)
    extra = rotation_sizes(qm.source, sizes)
    structures = len(qm.source.discovery.layer_structures)
    assert extra.replica == structures * sizes.largest_layer // sizes.element * 8  # float64 layers
    head = qm.model.get_output_embeddings().weight
    assert extra.untied_head == (head.numel() * sizes.element if qm.source.tied else 0)
    largest = max(p.numel() for p in qm.model.parameters())
    assert extra.working == sizes.hidden**2 * 8 + 2 * largest * 8
    plain = run_ram_bytes(sizes, 4, 1000, True)
    rotated = run_ram_bytes(sizes, 4, 1000, True, extra)
    assert rotated == max(sizes.base + extra.replica + extra.working, plain + extra.untied_head + extra.working)
    assert rotated > plain
