"""On the session's local 2-worker Ray cluster: the chained reduce (each worker adds its Hessian segment sums to
the running sum the previous worker passes on as an object ref) gives one process's bits, also when the second
worker of the chain is killed before its step (the driver replaces it and captures again)."""

import os
import signal

from qalgos.hessian import segment_tokens
from qlooper import LoopOptions, prepare_calibration, quantize_model
from test_executor import GPTQ_SPEC, assert_same_run
from toy_models import DENSE, ToyDecoder, calibration_rows

INPUTS = 4  # q/k/v, o, gate/up, down


def test_chained_sums_survive_a_worker_killed_in_the_chain(executor, monkeypatch) -> None:
    rows = calibration_rows(n=2300, length=60)  # about 143k tokens: 4 whole segments and a partial one
    cal = prepare_calibration(rows, batch_size=60, max_length=64, min_length=4)
    ref_model, ray_model = ToyDecoder(layers=2), ToyDecoder(layers=2)
    ref = quantize_model(ref_model, DENSE, cal, GPTQ_SPEC, "gptq")
    tokens = ref.report[0].tokens
    assert 4 * segment_tokens(64) < tokens < 5 * segment_tokens(64)
    killed: list[int] = []
    step = executor._chain_step

    def kill_the_second_worker_once(index, args):
        if index == 1 and not killed and executor._index == 1:
            killed.append(int(executor.identities[1]["pid"]))
            os.kill(killed[0], signal.SIGKILL)
        return step(index, args)

    monkeypatch.setattr(executor, "_chain_step", kill_the_second_worker_once)
    before, lost_before = len(executor.times), len(executor.lost)
    run = quantize_model(ray_model, DENSE, cal, GPTQ_SPEC, "gptq", options=LoopOptions(executor=executor))
    assert_same_run(ref, run, ref_model, ray_model)
    lost = executor.lost[lost_before:]
    assert len(killed) == 1 and len(lost) == 1 and lost[0].name == "lowbit-worker-1" and lost[0].pid == killed[0]
    assert "chained segment sums of layer model.layers.1" in lost[0].during
    for t in executor.times[before:]:
        # both workers hold segment sums: one hop between them, one sum per input back to the driver
        assert t.chained == INPUTS and t.bytes_chain == t.bytes_sums > 0, t
