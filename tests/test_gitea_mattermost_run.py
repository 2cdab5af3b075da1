"""A whole 3-worker sim run with `--forge gitea --chat mattermost` against the
fake servers: the real bootstrap, the real adapters inside the Forge/Chat
actors, webhooks through the intake to the routers, workers pushing to the
fake Gitea over git smart-HTTP. It must end with merged PRs and zero
contract violations."""

from __future__ import annotations

import io
import threading

import pytest

from agensh_ray.services.fakes.contract import missing_specs

SKIP = missing_specs("gitea", "mattermost")
pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.contract,
    pytest.mark.skipif(SKIP is not None, reason=SKIP or ""),
]


def test_three_sim_workers_on_gitea_and_mattermost(ray_session, tmp_path):
    from agensh_ray.driver import Run
    from agensh_ray.run import parse_args
    from agensh_ray.services.fakes import FakeStack
    from agensh_ray.task import Task

    with FakeStack(tmp_path / "services", workers=3) as stack:
        cfg = parse_args([
            "--workers", "3", "--forge", "gitea", "--chat", "mattermost", "--secrets", str(stack.secrets),
            "--gitea-url", stack.gitea.url, "--mattermost-url", stack.mm.url,
            "--intake-listen", stack.intake_listen, "--run-dir", str(tmp_path / "runs"), "--run-id", "prod",
            "--seed", "3",
        ])
        out = io.StringIO()
        result: dict = {}
        run = Run(cfg, Task.load(cfg.task), out=out)
        t = threading.Thread(target=lambda: result.setdefault("summary", run.execute()), daemon=True)
        t.start()
        t.join(timeout=420)
        assert not t.is_alive(), "the run did not finish in time:\n" + out.getvalue()
        summary = result["summary"]
        deliveries = list(stack.gitea.deliveries)
        [repo] = stack.gitea.repos.values()
        merged = [i for i in repo["issues"].values() if i["is_pull"] and i["merged"]]
        posts = len(stack.mm.posts)
        violations = stack.violations

    log = out.getvalue()
    assert summary is not None, log
    assert summary["prs_merged"] >= 2 and len(merged) == summary["prs_merged"], log
    assert summary["merged_pr_authors"] >= 2, log
    assert summary["score"] > 0, log
    assert deliveries and all(d.get("status") == 200 for d in deliveries), deliveries[:5]
    assert posts >= 1, "the workers' channel posts and DMs go through Mattermost"
    assert not violations, "\n".join(map(str, violations))
