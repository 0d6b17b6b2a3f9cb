"""The staged broadcast on a Ray cluster of 3 nodes on this machine (each its own object store;
``staged_cluster.py``, in its own process): the layer goes out in 2 rounds (1 node, then 2), changed parameters
and shared solve inputs are staged the same way, the bits equal one process, and a worker killed before a layer's
ship is replaced and gets the layer from the nodes holding it."""

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_staged_broadcast_on_three_nodes_keeps_the_bits_and_survives_a_lost_worker() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(HERE / "staged_cluster.py"), "--nodes", "3"],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["same_bits"]
    assert len(set(report["nodes"])) == 3 and report["driver_node"] not in report["nodes"]
    assert report["ship_rounds"] == [2, 2, 2, 2]  # 1 node from the driver's, then 2 from the 2 holders
    assert report["solve_jobs"] == [7, 7, 7, 7]  # q, k, v at once on the 3 workers
    lost = report["lost"]
    assert len(lost) == 1 and lost[0]["name"] == "lowbit-worker-2" and lost[0]["layer"] == 2
    assert lost[0]["during"].startswith("shipping layer 2:")
