"""The Ray executor on the session's local 2-worker cluster (conftest ``executor``): GPTQ and AWQ on the toy
decoders, bit for bit against one process (MoE experts on their owners included); a worker killed mid-layer
(also an expert owner, during its jobs and before a replay) is reported by name, replaced, and the run still
gives the same bits; a driver killed mid-run resumes from its checkpoint to the same bits."""

import os
import signal

import pytest
from qalgos.spec import QuantSpec
from qlooper import LoopOptions, quantize_model
from qlooper.processors.gptq import GPTQProcessor
from test_executor import assert_same_run
from toy_models import DENSE, MOE, ToyDecoder, toy_calibration

GPTQ_SPEC = QuantSpec(bits=4, group_size=32)
AWQ_SPEC = QuantSpec(bits=4, group_size=32, sym=False)


@pytest.mark.parametrize(
    ("method", "spec", "moe"), [("gptq", GPTQ_SPEC, False), ("awq", AWQ_SPEC, False), ("gptq", GPTQ_SPEC, True)]
)
def test_ray_matches_one_process(executor, method, spec, moe) -> None:
    definition = MOE if moe else DENSE
    cal = toy_calibration(n=10, batch_size=1 if moe else 2)
    ref_model, ray_model = ToyDecoder(moe=moe), ToyDecoder(moe=moe)
    ref = quantize_model(ref_model, definition, cal, spec, method)
    run = quantize_model(ray_model, definition, cal, spec, method, options=LoopOptions(executor=executor))
    assert_same_run(ref, run, ref_model, ray_model)


class KillWorkerMidLayer(GPTQProcessor):
    """GPTQ that kills worker 1 (SIGKILL) after solving layer 1's first group, before the next capture."""

    def __init__(self, spec, executor) -> None:
        super().__init__(spec)
        self.executor, self.killed = executor, None

    def process(self, ctx, group):
        out = super().process(ctx, group)
        if ctx.index == 1 and group.index == 0 and self.killed is None:
            self.killed = self.executor.identities[1]
            os.kill(int(self.killed["pid"]), signal.SIGKILL)
        return out


def test_worker_killed_mid_layer_is_named_replaced_and_changes_nothing(executor) -> None:
    cal = toy_calibration(n=10, batch_size=2)
    ref_model, ray_model = ToyDecoder(), ToyDecoder()
    ref = quantize_model(ref_model, DENSE, cal, GPTQ_SPEC, "gptq")
    processor = KillWorkerMidLayer(GPTQ_SPEC, executor)
    before = len(executor.lost)
    run = quantize_model(ray_model, DENSE, cal, None, processor, format="gptq", options=LoopOptions(executor=executor))
    assert_same_run(ref, run, ref_model, ray_model)
    lost = executor.lost[before:]
    assert len(lost) == 1 and lost[0].name == "lowbit-worker-1" and lost[0].pid == int(processor.killed["pid"])
    assert lost[0].layer == 1 and "layer model.layers.1" in lost[0].during
    assert executor.identities[1]["pid"] != lost[0].pid  # a fresh process took over under the same name
    assert executor.describe()["lost_workers"][-1]["name"] == "lowbit-worker-1"


class KillsExpertOwner(GPTQProcessor):
    """GPTQ that kills worker 1 (SIGKILL) twice on a MoE run: in layer 1 just before the owners' expert jobs go
    out (the driver copies the processor for each job; the copy is a plain GPTQProcessor), and in layer 2 after
    the expert groups, before the replay (the replacement needs the stand-ins' output tables)."""

    def __init__(self, spec, executor) -> None:
        super().__init__(spec)
        self.executor, self.killed = executor, []

    def _kill(self) -> None:
        pid = int(self.executor.identities[1]["pid"])
        os.kill(pid, signal.SIGKILL)
        self.killed.append(pid)

    def __copy__(self):
        if self.executor._index == 1 and not self.killed:
            self._kill()
        return GPTQProcessor(self.spec, self.module_specs)

    def end_layer(self, ctx):
        if ctx.index == 2 and len(self.killed) == 1:
            self._kill()
        return super().end_layer(ctx)


def test_expert_owner_killed_is_replaced_with_its_experts_and_tables(executor) -> None:
    cal = toy_calibration(n=10, batch_size=1)
    ref_model, ray_model = ToyDecoder(moe=True, top_k=2), ToyDecoder(moe=True, top_k=2)
    ref = quantize_model(ref_model, MOE, cal, GPTQ_SPEC, "gptq")
    processor = KillsExpertOwner(GPTQ_SPEC, executor)
    before = len(executor.lost)
    run = quantize_model(ray_model, MOE, cal, None, processor, format="gptq", options=LoopOptions(executor=executor))
    assert_same_run(ref, run, ref_model, ray_model)
    lost = executor.lost[before:]
    assert [(w.name, w.pid) for w in lost] == [("lowbit-worker-1", pid) for pid in processor.killed]
    assert "expert solves of layer model.layers.1" in lost[0].during and "replay" in lost[1].during
    assert executor.describe()["moe_experts"]["model.layers.2"]["experts_by_worker"] == [[0, 1], [2, 3]]


class DriverDiesAtLayer:
    """An extension that raises once the given layer is solved (before its boundary commits): a driver crash."""

    def __init__(self, layer: int) -> None:
        self.layer = layer

    def on_layer_done(self, step, _layer) -> None:
        if step.index == self.layer:
            raise KeyboardInterrupt(f"driver dies in layer {step.index}")


def test_driver_dies_then_resumes_under_ray_to_the_same_bits(executor, tmp_path) -> None:
    from qcheckpoint import CheckpointConfig

    cal = toy_calibration(n=10, batch_size=2)
    ref_model = ToyDecoder()
    ref = quantize_model(ref_model, DENSE, cal, GPTQ_SPEC, "gptq")
    config = CheckpointConfig(path=tmp_path / "ckpt")
    with pytest.raises(KeyboardInterrupt, match="driver dies in layer 2"):
        options = LoopOptions(executor=executor, extensions=(DriverDiesAtLayer(2),))
        quantize_model(ToyDecoder(), DENSE, cal, GPTQ_SPEC, "gptq", checkpoint=config, options=options)
    resumed_model = ToyDecoder()
    run = quantize_model(
        resumed_model, DENSE, cal, GPTQ_SPEC, "gptq", checkpoint=config, options=LoopOptions(executor=executor)
    )
    assert run.resumed_from == 2  # layers 0 and 1 were committed before the crash; 2 and 3 ran again
    assert_same_run(ref, run, ref_model, resumed_model)
