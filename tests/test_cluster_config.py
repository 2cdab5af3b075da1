"""cluster.yaml and cluster-local.yaml pass Ray's own validation."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml
from ray.autoscaler._private.commands import _bootstrap_config
from ray.autoscaler._private.util import prepare_config, validate_config

ROOT = Path(__file__).resolve().parent.parent


def load(name):
    return yaml.safe_load((ROOT / name).read_text())


def test_aws_cluster_has_1024_slots_and_validates():
    raw = load("cluster.yaml")
    config = prepare_config(copy.deepcopy(raw))
    validate_config(config)
    types = config["available_node_types"]
    head = types[config["head_node_type"]]
    workers = [t for name, t in types.items() if name != config["head_node_type"]]
    nodes = 1 + sum(t["min_workers"] for t in workers)
    assert nodes == 16
    assert head["resources"]["agent_slot"] == 64 and all(t["resources"]["agent_slot"] == 64 for t in workers)
    assert nodes * 64 == 1024
    for cmd in (*config["head_start_ray_commands"], *config["worker_start_ray_commands"]):
        if "ray start" in cmd:
            assert "RAY_AUTH_MODE=token" in cmd and "agent_slot" in cmd


def test_local_cluster_validates_and_bootstraps():
    raw = load("cluster-local.yaml")
    config = prepare_config(copy.deepcopy(raw))
    validate_config(config)
    boot = _bootstrap_config(copy.deepcopy(raw), no_config_cache=True)
    assert len(boot["provider"]["worker_ips"]) == 15
    assert boot["provider"]["head_ip"] == "10.0.0.10"
    starts = " ".join(boot["worker_start_ray_commands"] + boot["head_start_ray_commands"])
    assert "agent_slot" in starts and "RAY_AUTH_MODE=token" in starts
