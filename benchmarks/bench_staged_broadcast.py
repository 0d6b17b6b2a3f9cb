"""Who sends an object to whom: Ray's own byte counters for one object fetched by N nodes, all at once or in
the executor's staged rounds (``qlooper.broadcast``).

A Ray cluster of ``--nodes`` worker nodes on this machine (``ray.cluster_utils.Cluster``; each node its own
object store and object manager) plus a head node with no worker CPU, where the driver puts the object. Each
worker node runs one actor that fetches the object into its node's store (``ray.wait(fetch_local=True)``).
After each way, the raylets' debug logs say which node pushed the object to which (``object_manager.cc``:
"Push object on <from> to <to> of object <id>"; the raylets run at ``RAY_BACKEND_LOG_LEVEL=debug``): the pushes
from the driver's node are what its link carries. Prints one JSON line per way.

    PYTHONPATH=... python benchmarks/bench_staged_broadcast.py --nodes 7 --mb 16
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from pathlib import Path
from typing import Any

os.environ["RAY_BACKEND_LOG_LEVEL"] = "debug"  # the raylets log each push (read back below)
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


PUSH = re.compile(r"Push object on (\w+) to (\w+) of object object_id=(\w+)")


def pushes(session: Path, object_id: str) -> list[tuple[str, str]]:
    """(from node, to node) for each push of ``object_id`` the raylets logged."""
    found = []
    for log in sorted((session / "logs").glob("raylet*.out")):
        for match in PUSH.finditer(log.read_text(errors="replace")):
            if match.group(3) == object_id:
                found.append((match.group(1), match.group(2)))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=7)
    parser.add_argument("--mb", type=int, default=64)
    args = parser.parse_args()
    import numpy as np
    import ray
    from qlooper.broadcast import broadcast_rounds
    from ray.cluster_utils import Cluster

    @ray.remote(num_cpus=1)
    class Fetcher:
        def node(self) -> str:
            return ray.get_runtime_context().get_node_id()

        def fetch(self, refs: list[Any]) -> int:
            ray.wait(refs, num_returns=len(refs), fetch_local=True)
            return len(refs)

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        for _ in range(args.nodes):
            cluster.add_node(num_cpus=1)
        ray.init(address=cluster.address, log_to_driver=False)
        session = Path(ray._private.worker.global_worker.node.get_session_dir_path())
        driver = ray.get_runtime_context().get_node_id()
        actors = [Fetcher.remote() for _ in range(args.nodes)]
        nodes = ray.get([a.node.remote() for a in actors])
        size = args.mb * 2**20
        for way in ("at once", "staged"):
            ref = ray.put(np.ones(size, dtype=np.uint8))
            start = time.perf_counter()
            rounds = broadcast_rounds(nodes, {driver}) if way == "staged" else [list(range(len(actors)))]
            for members in rounds:
                ray.get([actors[i].fetch.remote([ref]) for i in members])
            wall = time.perf_counter() - start
            time.sleep(2)  # the raylets' logs flushed
            sent = pushes(session, ref.hex())
            senders = [source for source, _ in sent]
            row = {
                "way": way,
                "nodes": args.nodes,
                "object_mb": args.mb,
                "rounds": len(rounds),
                "wall_s": round(wall, 3),
                "pushes": len(sent),
                "from_driver_node": senders.count(driver),
                "from_other_nodes": sorted((senders.count(n) for n in set(senders) - {driver}), reverse=True),
            }
            print(json.dumps(row), flush=True)
            del ref
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
