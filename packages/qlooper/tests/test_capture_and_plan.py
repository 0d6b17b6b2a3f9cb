"""First-layer capture with the stop-forward sentinel; plan, boundaries and extension dispatch."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from qlooper import CaptureError, PlanError
from qlooper.capture import capture_first_layer_inputs
from qlooper.plan import LoopContext, LoopExtensions, LoopPlan, LoopStep
from torch import nn
from toy_models import ToyDecoder, toy_calibration


def test_capture_records_hidden_and_kwargs_and_stops_before_layer0() -> None:
    model = ToyDecoder()
    cal = toy_calibration(n=4, batch_size=2)
    ran = []
    for layer in model.model.layers:  # no layer computes (stand-in forwards record the calls)
        for module in layer.children():
            module.register_forward_hook(lambda *a: ran.append(1))
    cache = capture_first_layer_inputs(model, model.model.layers[0], cal)
    assert not ran
    assert len(cache) == 2
    hidden = cache.layer_inputs[0][0]
    b = cal.batches[0]
    assert torch.equal(hidden, model.model.embed_tokens(b.input_ids).detach())
    assert cache.layer_input_kwargs[0]["attention_mask"].shape[0] == b.input_ids.shape[0]
    assert torch.equal(cache.token_masks[0], b.attention_mask.bool())


def test_capture_fails_when_layer0_is_never_reached_and_propagates_model_errors() -> None:
    model = ToyDecoder()
    cal = toy_calibration(n=2, batch_size=2)
    with pytest.raises(CaptureError, match="without reaching the first decoder layer"):
        capture_first_layer_inputs(model, nn.Linear(2, 2), cal)

    class Boom(nn.Module):
        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> None:
            raise ValueError("model exploded")

    with pytest.raises(ValueError, match="model exploded"):
        capture_first_layer_inputs(Boom(), nn.Linear(2, 2), cal)


def test_plan_cursor_and_uniqueness() -> None:
    steps = tuple(LoopStep("layer", i, f"l.{i}") for i in range(3))
    plan = LoopPlan(steps)
    assert plan.after(steps[1]) == 2 and len(plan) == 3
    with pytest.raises(PlanError, match="unique"):
        LoopPlan((steps[0], steps[0]))
    with pytest.raises(PlanError, match="not part"):
        plan.after(LoopStep("layer", 9, "x"))


class Recorder:
    def __init__(self, cursor: int | None) -> None:
        self.cursor = cursor
        self.seen: list[tuple[int, int]] = []
        self.kept = None

    def on_start(self, context: LoopContext) -> int | None:
        return self.cursor

    def on_boundary(self, boundary) -> None:
        self.seen.append((boundary.cursor, len(boundary.quiesce())))
        self.kept = boundary


def test_extensions_start_cursor_rules() -> None:
    plan = LoopPlan((LoopStep("layer", 0, "a"), LoopStep("layer", 1, "b")))
    ctx = LoopContext(plan, None, [], None)
    assert LoopExtensions([Recorder(None), Recorder(1)]).start(ctx) == 1
    with pytest.raises(PlanError, match="conflicting"):
        LoopExtensions([Recorder(0), Recorder(1)]).start(ctx)
    with pytest.raises(PlanError, match="cursor must be an int"):
        LoopExtensions([Recorder(5)]).start(ctx)


def test_boundary_quiesce_waits_for_all_and_raises_failure_after() -> None:
    plan = LoopPlan((LoopStep("layer", 0, "a"), LoopStep("layer", 1, "b")))
    rec = Recorder(None)
    exts = LoopExtensions([rec])
    gate = threading.Event()
    with ThreadPoolExecutor(2) as pool:
        slow = pool.submit(lambda: gate.wait(5) and "slow")
        gate.set()
        exts.publish(plan.steps[0], 1, [slow, pool.submit(lambda: "fast")])
        assert rec.seen == [(1, 2)]
        assert exts.pending() == []  # finished successful futures are dropped
        bad = pool.submit(lambda: (_ for _ in ()).throw(RuntimeError("finalizer broke")))
        with pytest.raises(RuntimeError, match="finalizer broke"):
            exts.publish(plan.steps[1], 2, [bad])
        assert exts.pending() == [bad]  # failed futures are kept
    with pytest.raises(RuntimeError, match="only valid during its callback"):
        rec.kept.quiesce()
