"""The staged broadcast plan: in which rounds the workers fetch an object so that the copies double each round.

Ray keeps one object store per node and fetches a missing object from a node holding a copy, picked at random
among the known holders (secondary copies included); it builds no broadcast tree, so when every node asks for
a fresh object at once, all of them pull from its first location, the driver's node (Ray issue 2945, "object
broadcast overloads the sending object manager"). Fetching in rounds makes the copies double instead: in
round ``r`` as many new nodes fetch as there are holders after round ``r - 1``, so each holder serves about one
node a round, ``ceil(log2(1 + new nodes / holders))`` rounds in all, and the driver's link carries the object
about once. Workers on a node that holds it already (the driver's, or one of an earlier round) read it there.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence


def broadcast_rounds(nodes: Sequence[str], holders: Collection[str]) -> list[list[int]]:
    """Worker indices per round. ``nodes[i]``: the node worker ``i`` runs on; ``holders``: the nodes holding a
    copy now (at least one, e.g. the driver's). Round 0 takes the workers on holder nodes and those of the
    first ``len(holders)`` other nodes (in worker order); each later round takes the workers of as many new
    nodes as there are holders by then. A node's workers are always in one round (they share its copy).
    No rounds when there are no workers."""
    if not holders:
        raise ValueError("holders: expected at least one node holding the object, found none")
    held = set(holders)
    new_nodes = list(dict.fromkeys(node for node in nodes if node not in held))
    rounds: list[list[int]] = []
    copies, start = len(held), 0
    round_of = {node: 0 for node in held}
    while start < len(new_nodes) or not rounds:
        for node in new_nodes[start : start + copies]:
            round_of[node] = len(rounds)
        start += copies
        copies *= 2
        rounds.append([])
    for index, node in enumerate(nodes):
        rounds[round_of[node]].append(index)
    return [r for r in rounds if r]
