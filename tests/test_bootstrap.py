"""The provisioning (`agensh_ray.services.provision`) and its CLI `python -m agensh_ray.bootstrap` against
the fake Gitea and fake Mattermost: everything made once, nothing duplicated on a second run, secrets only in
the 0600 file; the CLI prints the same lines and exits 0, 1 or 2."""

from __future__ import annotations

import json
import stat
import subprocess
import sys

import pytest

from agensh_ray.services.fakes.contract import missing_specs

SKIP = missing_specs("gitea", "mattermost")
pytestmark = [
    pytest.mark.contract,
    pytest.mark.skipif(SKIP is not None, reason=SKIP or ""),
]


def counts(stack) -> dict:
    g, m = stack.gitea, stack.mm
    [repo] = g.repos.values()
    return {
        "gitea_users": len(g.users), "gitea_tokens": len(g.tokens), "orgs": len(g.orgs), "repos": len(g.repos),
        "issues": len(repo["issues"]), "hooks": len(repo["hooks"]), "protections": len(repo["protections"]),
        "tag_protections": len(repo["tag_protections"]), "collaborators": len(repo["collaborators"]),
        "mm_users": len(m.users), "mm_tokens": len(m.tokens), "teams": len(m.teams), "channels": len(m.channels),
        "task_members": len(next(iter(m.channel_members.values()))),
    }


def test_bootstrap_twice_creates_everything_once(tmp_path):
    from agensh_ray.services.fakes import FakeStack

    with FakeStack(tmp_path, workers=2) as stack:
        secrets = json.loads(stack.secrets.read_text())
        mode = stat.S_IMODE(stack.secrets.stat().st_mode)
        first = counts(stack)
        out1 = stack.bootstrap_output
        stack.bootstrap()
        second = counts(stack)
        again = json.loads(stack.secrets.read_text())
        g = stack.gitea
        [repo] = g.repos.values()
        protection = repo["protections"]["main"]
        [hook] = repo["hooks"].values()
        violations = stack.violations

    assert mode == 0o600
    # w001, w002, agensh-driver (+ the fake's own admin); one token each.
    assert first == second == {
        "gitea_users": 4, "gitea_tokens": 4, "orgs": 1, "repos": 1, "issues": 1, "hooks": 1, "protections": 4,
        "tag_protections": 1, "collaborators": 3, "mm_users": 4, "mm_tokens": 4, "teams": 1, "channels": 1,
        "task_members": 4,
    }
    assert again == secrets, "a second run keeps the working tokens and the webhook secret"
    assert sorted(secrets["gitea"]["users"]) == ["admin", "w001", "w002"]
    assert secrets["gitea"]["users"]["admin"]["login"] == "agensh-driver"
    assert (protection["enable_push"], protection["required_approvals"], protection["enable_status_check"]) == (
        False, 0, False)
    # Each worker's namespace: only that worker pushes and force-pushes there; every other branch: nobody.
    assert sorted(repo["protections"]) == ["**", "main", "w001/**", "w002/**"]
    ns = repo["protections"]["w001/**"]
    assert (ns["enable_push"], ns["enable_push_whitelist"], ns["push_whitelist_usernames"]) == (True, True, ["w001"])
    assert (ns["enable_force_push"], ns["force_push_allowlist_usernames"]) == (True, ["w001"])
    rest = repo["protections"]["**"]
    assert (rest["enable_push"], rest["enable_force_push"]) == (False, False)
    assert [t["name_pattern"] for t in repo["tag_protections"]] == ["*"]
    assert hook["secret"] == secrets["gitea"]["webhook_secret"] and hook["url"].endswith("/hooks/gitea")
    assert "pull_request" in hook["events"] and "push" in hook["events"]
    out2 = stack.bootstrap_output[len(out1):]
    assert "created" not in out2 and "pushed" not in out2 and "opened issue" not in out2
    for u in [*secrets["gitea"]["users"].values(), *secrets["mattermost"]["users"].values()]:
        assert u["token"] not in stack.bootstrap_output and u["password"] not in stack.bootstrap_output
    assert not violations, "\n".join(map(str, violations))


def test_a_worker_added_later_gets_its_namespace_before_the_catch_all_rule(tmp_path):
    """Gitea applies the first glob rule that matches, by priority (a new rule comes last): the `**` rule that
    nobody pushes to must stay behind every namespace, or the new worker could push nowhere."""
    from agensh_ray.services.fakes import FakeStack

    with FakeStack(tmp_path, workers=2, mattermost=False) as stack:
        stack.workers = 3
        stack.bootstrap()
        [repo] = stack.gitea.repos.values()
        policy = json.loads((repo["path"] / "agensh-push-policy.json").read_text())
        output, violations = stack.bootstrap_output, stack.violations
    # The order the fake's receive hook applies them in, as Gitea does: plain names, then globs by priority.
    assert [b["rule"] for b in policy["branches"]] == ["main", "w001/**", "w002/**", "w003/**", "**"]
    assert "  1 branch namespaces <worker>/** (only their worker pushes there)" in output.splitlines()
    assert output.count("every other branch (**): nobody pushes") == 2
    assert not violations, "\n".join(map(str, violations))


def test_a_lost_secrets_file_replaces_tokens_instead_of_adding(tmp_path):
    from agensh_ray.services.fakes import FakeStack

    with FakeStack(tmp_path, workers=1, mattermost=False) as stack:
        old = json.loads(stack.secrets.read_text())["gitea"]["users"]["w001"]["token"]
        stack.secrets.unlink()
        stack.bootstrap()
        new = json.loads(stack.secrets.read_text())["gitea"]["users"]["w001"]["token"]
        tokens = [t for t in stack.gitea.tokens.values() if t["login"] == "w001"]
        violations = stack.violations
    assert new != old and [t["sha1"] for t in tokens] == [new]
    assert not violations, "\n".join(map(str, violations))


def test_the_cli_prints_its_progress_and_exit_codes(tmp_path, capsys):
    """A first run (FakeStack calls the provisioning directly), then the CLI as a real process: nothing left to
    create, the same secrets; then the refusals in-process: 2 for an unknown task, 1 for a bad token."""
    from agensh_ray.bootstrap import main
    from agensh_ray.services.fakes import FakeStack

    with FakeStack(tmp_path, workers=2) as stack:
        g, m = stack.gitea.url, stack.mm.url
        secrets = json.loads(stack.secrets.read_text())
        assert stack.bootstrap_output.splitlines() == [
            f"bootstrapping Gitea at {g} for 2 workers, task textkit",
            "  3 Gitea users with scoped tokens",
            "  created org agensh",
            "  created repository agensh/run",
            "  pushed the starter to main",
            "  opened issue #1 (the task)",
            "  protected main (no pushes; PRs with 0 approvals)",
            "  2 branch namespaces <worker>/** (only their worker pushes there)",
            "  every other branch (**): nobody pushes",
            "  protected all tags (nobody pushes tags)",
            f"  webhook -> {stack.intake_url}",
            f"bootstrapping Mattermost at {m}",
            "  created team agensh",
            "  created channel ~task",
            "  3 Mattermost users with tokens, team agensh, channel ~task",
            f"done; tokens are in {stack.secrets} (mode 0600)",
        ]
        args = stack.bootstrap_args()
        res = subprocess.run([sys.executable, "-m", "agensh_ray.bootstrap", *args], capture_output=True, text=True,
                             timeout=120, check=False)
        assert (res.returncode, res.stderr) == (0, ""), res.stderr
        assert res.stdout.splitlines() == [
            f"bootstrapping Gitea at {g} for 2 workers, task textkit",
            "  3 Gitea users with scoped tokens",
            f"bootstrapping Mattermost at {m}",
            "  3 Mattermost users with tokens, team agensh, channel ~task",
            f"done; tokens are in {stack.secrets} (mode 0600)",
        ]
        assert json.loads(stack.secrets.read_text()) == secrets

        assert main([*args, "--task", "no-such-task"]) == 2
        assert capsys.readouterr().err.startswith("error: ")
        worker_token = tmp_path / "w001.token"
        worker_token.write_text(secrets["gitea"]["users"]["w001"]["token"])
        admin_file = args[args.index("--admin-token-file") + 1]
        assert main([a if a != admin_file else str(worker_token) for a in args]) == 1
        assert capsys.readouterr().err == f"error: the token in {worker_token} is not a Gitea site admin's\n"
        (tmp_path / "empty.token").write_text("\n")
        assert main([a if a != admin_file else str(tmp_path / "empty.token") for a in args]) == 1
        assert capsys.readouterr().err == f"error: {tmp_path / 'empty.token'} is empty\n"
        violations = stack.violations
    assert not violations, "\n".join(map(str, violations))
