"""The single-agent baseline without Ray: its stop hook (`KeepGoing`, the clone's fingerprint), the tools a
run without the board and chat gives its agent, the clock without nudges or share-findings, and the config
and CLI rules. A whole baseline run is in tests/test_experiment.py (marker `experiment`)."""

from __future__ import annotations

import subprocess

import pytest
from mcp import Client

from agensh_ray import prompts
from agensh_ray.config import BOARD_TOOLS, CHAT_TOOLS, RunConfig
from agensh_ray.routing import TurnClock
from agensh_ray.run import parse_args
from agensh_ray.worker.keep_going import KeepGoing, fingerprint
from tests.support import LocalServices


def test_keep_going_until_n_idle_turns_in_a_row():
    k = KeepGoing(3)
    assert k.turn_ended(True, "end_turn", True) == "keep_going"
    assert k.turn_ended(False, "end_turn", True) == "keep_going"
    assert k.turn_ended(False, "end_turn", True) == "keep_going"
    assert k.turn_ended(True, "end_turn", True) == "keep_going"  # work resets the count
    assert [k.turn_ended(False, "end_turn", True) for _ in range(3)] == ["keep_going", "keep_going", "stop"]
    assert k.told == 6 and "3 turns in a row without work" in k.why_stop


def test_keep_going_leaves_the_deadline_cancels_crashes_and_failed_turns_alone():
    k = KeepGoing(1)
    assert k.turn_ended(False, "cancelled", True) is None  # the run is stopping
    assert k.turn_ended(False, "agent_died", True) is None  # the host restarts the agent
    assert k.idle == 0
    assert k.turn_ended(True, "end_turn", False) is None  # past the deadline: the run ends anyway
    assert k.turn_ended(False, "error", True) is None  # a failed turn: the host backs off, the agent did not stop
    assert k.idle == 0


def test_the_fingerprint_sees_commits_edits_and_new_files(tmp_path, git_env):
    repo = tmp_path / "r"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a").write_text("1")
    subprocess.run(["git", "-C", str(repo), "add", "a"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "a"], check=True)
    seen = {fingerprint(repo)}
    assert fingerprint(repo) in seen  # stable
    (repo / "a").write_text("2")
    seen.add(fingerprint(repo))
    (repo / "a").write_text("3")  # a second edit of a file already modified
    seen.add(fingerprint(repo))
    (repo / "b").write_text("new")
    seen.add(fingerprint(repo))
    (repo / "b").write_text("newer")  # an edit of a file never added
    seen.add(fingerprint(repo))
    subprocess.run(["git", "-C", str(repo), "commit", "-qam", "b"], check=True)
    seen.add(fingerprint(repo))
    assert len(seen) == 6


def test_the_baseline_is_one_worker_without_board_or_chat():
    cfg = RunConfig(workers=1, baseline=True)
    assert not cfg.board_tools and not cfg.chat_tools and cfg.tools_off == BOARD_TOOLS | CHAT_TOOLS
    with pytest.raises(ValueError, match="one worker"):
        RunConfig(workers=2, baseline=True)
    assert RunConfig(board_tools=False).tools_off == BOARD_TOOLS


def test_the_cli_baseline_defaults_to_one_worker(tmp_path):
    cfg = parse_args(["--baseline", "--run-dir", str(tmp_path), "--baseline-idle-turns", "5"])
    assert cfg.baseline and cfg.workers == 1 and cfg.baseline_idle_turns == 5
    with pytest.raises(SystemExit):
        parse_args(["--baseline", "--workers", "4", "--run-dir", str(tmp_path)])


def test_the_baseline_prompts_name_no_board_and_keep_going_says_what_is_left():
    first = prompts.baseline("w001")
    assert "worker id: w001" in first and "board" not in first and "send_dm" not in first
    assert "30 minutes" in prompts.keep_going(30.2)


def test_no_nudge_and_no_share_findings_without_the_board():
    routing = RunConfig().routing.model_copy(update={"nudge": False})
    c = TurnClock.from_config(routing, 14400, board=False)
    assert c.due(10_000) == [] and c.next_due_in(10_000) == pytest.approx(14400 - 2700 - 10_000)
    assert c.turn_ended(10, 0, "first", "end_turn") is None
    assert "keep_going" in TurnClock.HOST_KINDS  # it wakes an idle worker, and never draws share-findings


async def test_a_baseline_host_serves_only_the_forge_tools(tmp_path, git_env):
    services = LocalServices(tmp_path / "svc", ["w001"])
    h = services.host(tmp_path / "run", ["w001"], baseline=True)
    await h.start()
    try:
        async with Client(h.tools.url("w001", h.workers["w001"].token)) as c:
            names = {t.name for t in (await c.list_tools()).tools}
        assert names == {"pr_create", "pr_list", "pr_view", "pr_review", "pr_comment", "pr_merge", "issue_view"}
    finally:
        await h.stop()
        services.close()
