"""On the session's local 2-worker Ray cluster: a Hessian segment straddling the two shards is formed on the
worker holding its first rows (real segment sizes: 32768 rows), with one process's bits, also when that
worker is killed between the capture and the straddle call (the driver captures again)."""

import os
import signal

from qalgos.hessian import segment_tokens
from qlooper import LoopOptions, prepare_calibration, quantize_model
from test_executor import GPTQ_SPEC, assert_same_run
from toy_models import DENSE, ToyDecoder, calibration_rows

INPUTS = 4  # q/k/v, o, gate/up, down


def test_straddling_segment_formed_on_its_owner_survives_a_killed_owner(executor, monkeypatch) -> None:
    rows = calibration_rows(n=1140, length=60)  # about 70k tokens: 2 whole segments and a partial one
    cal = prepare_calibration(rows, batch_size=60, max_length=64, min_length=4)
    ref_model, ray_model = ToyDecoder(layers=2), ToyDecoder(layers=2)
    ref = quantize_model(ref_model, DENSE, cal, GPTQ_SPEC, "gptq")
    tokens = ref.report[0].tokens
    assert 2 * segment_tokens(64) < tokens < 3 * segment_tokens(64)
    killed: list[int] = []
    call = executor._call

    def kill_the_owner_once(method, per_worker, during, shared=None):
        if method == "straddle" and not killed and "model.layers.1" in during:
            killed.append(int(executor.identities[0]["pid"]))
            os.kill(killed[0], signal.SIGKILL)
        return call(method, per_worker, during, shared)

    monkeypatch.setattr(executor, "_call", kill_the_owner_once)
    before, lost_before = len(executor.times), len(executor.lost)
    run = quantize_model(ray_model, DENSE, cal, GPTQ_SPEC, "gptq", options=LoopOptions(executor=executor))
    assert_same_run(ref, run, ref_model, ray_model)
    lost = executor.lost[lost_before:]
    assert len(killed) == 1 and len(lost) == 1 and lost[0].name == "lowbit-worker-0" and lost[0].pid == killed[0]
    assert "straddling segments of layer model.layers.1" in lost[0].during
    partial = tokens - 2 * segment_tokens(64)
    for t in executor.times[before:]:
        # segment 0 lies inside shard 0, segment 1 straddles the two shards, the rest is the open segment
        assert t.straddled == INPUTS and t.driver_rows == INPUTS * partial, t
