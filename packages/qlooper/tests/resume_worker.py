"""A quantization run in its own process, for the resume tests.

usage: python resume_worker.py METHOD CKPT_DIR OUT_FILE [FAULT]

FAULT is one of ``none``, ``sigterm@<cursor>`` (SIGTERM to itself at that boundary, before the commit),
``sigkill@<cursor>`` (SIGKILL at that boundary), ``sigkill-finalizer@<module name>`` (SIGKILL while that
module is being finalized). The finished run's packed tensors, logical weights and report are written to
OUT_FILE (``.npz``) and ``OUT_FILE.json``. Exit code 3 means the run stopped cooperatively.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
torch.set_num_threads(1)

from qalgos.spec import QuantSpec  # noqa: E402
from qcheckpoint import CheckpointConfig  # noqa: E402
from qlooper import GPTQProcessor, LoopOptions, RunStopped, quantize_model  # noqa: E402
from qlooper.processors.eora import EoRAProcessor  # noqa: E402
from qlooper.processors.paroquant import ParoQuantProcessor  # noqa: E402
from toy_models import DENSE, PARO_SPEC, ToyDecoder, toy_calibration  # noqa: E402


class Fault:
    def __init__(self, kind: str, at: int) -> None:
        self.kind, self.at = kind, at

    def on_boundary(self, boundary) -> None:
        if boundary.cursor != self.at:
            return
        if self.kind == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)
        elif self.kind == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)


def main() -> int:
    method, ckpt, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    fault = sys.argv[4] if len(sys.argv) > 4 else "none"
    extensions: tuple = ()
    replace = None
    if fault.startswith(("sigterm@", "sigkill@")):
        kind, at = fault.split("@")
        extensions = (Fault(kind, int(at)),)
    elif fault.startswith("sigkill-finalizer@"):
        target = fault.split("@", 1)[1]

        def replace(name, module, done):
            if name == target:
                os.kill(os.getpid(), signal.SIGKILL)
            return None

    options = LoopOptions(extensions=extensions, replace_module=replace, finalizer_workers=2)
    torch.manual_seed(1234)  # the RNG state is part of what resume restores
    spec = QuantSpec(bits=4, group_size=32)
    if method == "qqq":
        from qalgos.qqq import qqq_spec

        spec = qqq_spec(32)
    try:
        config = CheckpointConfig(path=ckpt)
        processor: object = method
        if method == "gptq+eora":  # GPTQ with rank-4 EoRA adapters (saved beside the tensors below)
            processor = EoRAProcessor(GPTQProcessor(spec), 4)
        if method == "paroquant":  # a small optimisation budget: the resume path is what is tested
            processor = ParoQuantProcessor(PARO_SPEC)
        if method == "gptq-bf16":  # GPTQ with bfloat16 layer forwards (LoopOptions.compute_dtype)
            processor, options.compute_dtype = "gptq", "bfloat16"
        fmt = {"gptq+eora": "gptq", "paroquant": "paroquant"}.get(method)
        run = quantize_model(
            ToyDecoder(), DENSE, toy_calibration(), spec, processor, format=fmt, checkpoint=config, options=options
        )
    except RunStopped as stopped:
        print(f"stopped at {stopped.cursor}", flush=True)
        return 3
    arrays = {}
    for name, done in run.modules.items():
        for key, value in done.tensors().items():
            arrays[f"{name}/{key}"] = value
        logical = getattr(done.weight, "weight", done.weight)  # ParoQuant: the AWQ part (its transform is packed)
        for field in ("codes", "scales", "zeros", "g_idx", "s_group", "s_channel"):
            value = getattr(logical, field, None)
            if value is not None:
                arrays[f"{name}/logical.{field}"] = value
    for name, adapter in getattr(processor, "adapters", {}).items():
        arrays[f"{name}/eora.a"], arrays[f"{name}/eora.b"] = adapter.a.numpy(), adapter.b.numpy()
    np.savez(out, **arrays)
    rows = [{k: v for k, v in asdict(r).items() if k not in ("seconds", "finalize_seconds")} for r in run.report]
    Path(f"{out}.json").write_text(json.dumps({"resumed_from": run.resumed_from, "report": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
