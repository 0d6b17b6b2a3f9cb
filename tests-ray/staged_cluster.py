"""A Ray cluster of several nodes on this machine (``ray.cluster_utils.Cluster``: one raylet and one object store
each), for the staged broadcast: the driver on a head node with no worker CPU, ``--nodes`` nodes of one CPU,
one worker each. Runs GPTQ on the toy decoder there and in one process, SIGKILLs worker 2 before layer 2 (so
its replacement is fed from the staged copies), and prints a JSON line: the bits equal, each layer's ship
rounds, the workers' nodes, the lost workers.

Its own process (``tests-ray/test_ray_staged.py`` runs it): a process joins one Ray cluster only, and the
session fixture's local cluster is another.
"""

from __future__ import annotations

import argparse
import json
import os
import signal

from qalgos.spec import QuantSpec
from qlooper import LoopOptions, quantize_model
from qlooper.processors.gptq import GPTQProcessor

SPEC = QuantSpec(bits=4, group_size=32)


class KillBeforeLayer(GPTQProcessor):
    """GPTQ that SIGKILLs worker ``victim`` when layer ``layer`` starts (before its first capture)."""

    def __init__(self, spec: QuantSpec, executor, layer: int, victim: int) -> None:
        super().__init__(spec)
        self.executor, self.layer, self.victim = executor, layer, victim

    def start_layer(self, ctx) -> None:
        super().start_layer(ctx)
        if ctx.index == self.layer:
            os.kill(int(self.executor.identities[self.victim]["pid"]), signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=3)
    args = parser.parse_args()
    import qlooper.ray_executor as ray_executor
    import ray
    from ray.cluster_utils import Cluster
    from test_executor import assert_same_run
    from toy_models import DENSE, ToyDecoder, toy_calibration

    ray_executor.STAGE_MIN_BYTES = 0  # stage every shared object, however small (the toy's are)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        for _ in range(args.nodes):
            cluster.add_node(num_cpus=1)
        ray.init(address=cluster.address, log_to_driver=False)
        cal = toy_calibration(n=10, batch_size=2)
        ref_model, ray_model = ToyDecoder(), ToyDecoder()
        ref = quantize_model(ref_model, DENSE, cal, SPEC, "gptq")
        with ray_executor.RayExecutor(cluster.address, workers=args.nodes) as executor:
            processor = KillBeforeLayer(SPEC, executor, layer=2, victim=args.nodes - 1)
            options = LoopOptions(executor=executor)
            run = quantize_model(ray_model, DENSE, cal, None, processor, format="gptq", options=options)
            assert_same_run(ref, run, ref_model, ray_model)
            print(
                json.dumps(
                    {
                        "same_bits": True,
                        "driver_node": executor._driver_node,
                        "nodes": [w["node"] for w in executor.identities],
                        "ship_rounds": [t.ship_rounds for t in executor.times],
                        "solve_jobs": [t.solve_jobs for t in executor.times],
                        "lost": [vars(lost) for lost in executor.lost],
                    }
                ),
                flush=True,
            )
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
