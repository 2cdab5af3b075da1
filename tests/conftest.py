"""Shared fixtures: one Ray instance for the whole session (Ray's own
`ray_start_regular_shared` pattern); most tests need no Ray at all.

Markers say what a test starts: a test that asks for `ray_session` is marked
`ray` here, so `-m "not ray"` runs exactly the tests that start no Ray."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "ray_session" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.ray)


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray instance shared by every test that asks for it."""
    import ray

    if not ray.is_initialized():
        ray.init(
            address="local",  # always a fresh instance of our own, never someone else's cluster
            num_cpus=2,
            include_dashboard=False,
            namespace="agensh-tests",
            log_to_driver=False,
            runtime_env={"env_vars": {"PYTHONUNBUFFERED": "1"}},
        )
    yield ray
    ray.shutdown()


@pytest.fixture
def git_env(tmp_path, monkeypatch):
    """A hermetic git identity so commits work on a clean machine."""
    monkeypatch.setenv("GIT_AUTHOR_NAME", "test")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "test@example.invalid")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "test")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "test@example.invalid")
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    os.makedirs(tmp_path / "home", exist_ok=True)
    return tmp_path


@pytest.fixture(scope="module")
def local_cluster():
    """A real 3-node Ray cluster on this machine (`tests/multinode.py`): the head with 4 agent slots, worker
    nodes n1 and n2 with 8 each and the `services` node-type resource. Every process of every node is
    stopped, by its own pids, when the module's tests are done."""
    from tests.multinode import LocalCluster

    with LocalCluster() as cluster:
        cluster.start_head({"agent_slot": 4})
        for name in ("n1", "n2"):
            cluster.add_node(name, {"agent_slot": 8, "services": 1})
        cluster.wait_for_nodes()
        yield cluster
