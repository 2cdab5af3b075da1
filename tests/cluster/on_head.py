"""Run on the head of a test cluster through `ray exec` (from ~/agensh-ray, with the cluster's
~/venv python): tell where a run's actors ran (the run has ended: Ray still knows its dead actors).

    python tests/cluster/on_head.py placement RUN_ID   # one line: PLACEMENT {"head": ip, "actors": {name: ip}}
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

import ray


def placement(run_id: str) -> int:
    from ray.util.state import list_actors, list_nodes

    ray.init(address="auto", logging_level=logging.ERROR, log_to_driver=False)
    ips = {n.node_id: n.node_ip for n in list_nodes(limit=1000)}
    head = next(n.node_ip for n in list_nodes(limit=1000) if n.is_head_node)
    actors = {a.name: ips.get(a.node_id) for a in list_actors(limit=10_000) if a.name and run_id in a.name}
    print("PLACEMENT " + json.dumps({"head": head, "actors": actors}), flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="what", required=True)
    sub.add_parser("placement").add_argument("run_id")
    return placement(ap.parse_args().run_id)


if __name__ == "__main__":
    sys.exit(main())
