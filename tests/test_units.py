"""Small pieces without Ray: config, harness registry, trace writer, the
workdir confinement of the ACP client, the launch schedule, the CLI."""

from __future__ import annotations

import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from agensh_ray.agent.harness import get_harness
from agensh_ray.config import RunConfig, worker_ids
from agensh_ray.confined import Confined
from agensh_ray.placement import check_services_resource, launch_offsets, services_resources
from agensh_ray.errors import CapacityError, ConfinementError, HarnessError
from agensh_ray.trace import SCHEMA_VERSION, SCHEMAS, TABLES, BoardRow, TraceWriter, TurnRow


def test_unknown_harness_lists_the_known_ones():
    with pytest.raises(HarnessError) as e:
        get_harness("copilt")
    for name in ("copilot", "claude", "codex", "gemini", "sim", "cmd:"):
        assert name in str(e.value)


def test_cmd_harness_takes_any_command_line():
    h = get_harness("cmd:my-agent --acp --verbose")
    assert h.command == ("my-agent", "--acp", "--verbose")
    with pytest.raises(HarnessError):
        get_harness("cmd:")
    with pytest.raises(HarnessError, match="not found on PATH"):
        get_harness("cmd:definitely-not-installed-agent").argv()


def test_worker_environment_is_sealed(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-secret-value")
    monkeypatch.setenv("COPILOT_PROVIDER_API_KEY", "copilot-secret")
    monkeypatch.setenv("UNRELATED_VARIABLE", "x")
    env = get_harness("claude").environment(home=tmp_path / "h", extra={})
    assert env["ANTHROPIC_API_KEY"] == "sk-secret-value"
    assert "COPILOT_PROVIDER_API_KEY" not in env and "UNRELATED_VARIABLE" not in env
    assert env["HOME"] == str(tmp_path / "h") and env["CLAUDE_CONFIG_DIR"].startswith(str(tmp_path / "h"))
    assert "sk-secret-value" not in get_harness("claude").redact("key=sk-secret-value", env)


def test_config_rejects_nonsense_with_a_clear_message():
    with pytest.raises(ValueError, match="between 1 and 1,024"):
        RunConfig(workers=2000)
    with pytest.raises(ValueError, match="time_scale"):
        RunConfig(time_scale=0)
    with pytest.raises(ValueError, match="extra"):
        RunConfig.model_validate({"workers": 2, "wokers": 3})


def test_launch_schedule_is_staggered_then_fast():
    cfg = RunConfig(workers=200)
    offs = launch_offsets(cfg, 200)
    assert offs[:3] == [0.0, 30.0, 60.0]
    assert offs[120] - offs[119] == 30.0  # still within the first hour
    assert offs[125] - offs[124] == 3.0
    assert worker_ids(3) == ["w001", "w002", "w003"] and worker_ids(1024)[-1] == "w1024"


def test_services_go_to_the_head_or_to_the_named_node_type():
    assert services_resources(RunConfig()) is None  # the driver pins them to its own node
    cfg = RunConfig(services_resource="services")
    assert services_resources(cfg) == {"services": 0.001}
    check_services_resource(cfg, {"CPU": 6.0, "services": 2.0})
    with pytest.raises(CapacityError, match="'services'.*agent_slot"):
        check_services_resource(cfg, {"CPU": 6.0, "agent_slot": 24.0, "node:127.0.0.1": 1.0})
    check_services_resource(RunConfig(), {"CPU": 2.0})


def test_paths_outside_the_workdir_are_refused(tmp_path):
    (tmp_path / "work").mkdir()
    work = Confined(tmp_path / "work")
    assert work.path("a/b.txt") == tmp_path / "work" / "a" / "b.txt"
    for bad in ("../escape.txt", "/etc/passwd", str(tmp_path / "work" / ".." / "x")):
        with pytest.raises(ConfinementError, match="outside"):
            work.relative(bad)
    (tmp_path / "work" / "link").symlink_to("/etc")
    with pytest.raises(ConfinementError, match="symbolic link"):
        work.read_text("link/passwd")


def test_trace_writer_writes_typed_parquet(tmp_path):
    w = TraceWriter(tmp_path, "t", "run-1", flush_interval_s=0)
    w.write(BoardRow(seq=1, type="FACT", text="x", worker_id="w001", event_id="board:1"))
    w.write(TurnRow(turn=1, phase="start", worker_id="w001"))
    w.close()
    w.close()  # idempotent
    board = pq.read_table(tmp_path / "trace" / "board")
    assert board.schema.equals(SCHEMAS["board"], check_metadata=False)
    row = board.to_pylist()[0]
    assert row["run_id"] == "run-1" and row["seq"] == 1 and row["ts"].tzinfo is not None
    assert set(TABLES) >= {"board", "messages", "forge", "turns", "tool_calls", "usage", "deliveries", "scores",
                           "lifecycle"}


def test_run_help_explains_every_flag():
    out = subprocess.run([sys.executable, "-m", "agensh_ray.run", "--help"], capture_output=True, text=True,
                         check=True).stdout
    for flag in ("--workers", "--task", "--harness", "--minutes", "--hours", "--time-scale", "--run-dir", "--seed"):
        assert flag in out


def test_run_rejects_bad_input_before_starting_anything():
    r = subprocess.run([sys.executable, "-m", "agensh_ray.run", "--harness", "nope"], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "unknown harness 'nope'" in r.stderr
    r = subprocess.run([sys.executable, "-m", "agensh_ray.run", "--task", "no-such-task"], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "unknown task" in r.stderr
    r = subprocess.run([sys.executable, "-m", "agensh_ray.run", "--workers", "0"], capture_output=True, text=True)
    assert r.returncode == 2 and "between 1 and 1,024" in r.stderr


def test_trace_files_roll_by_window_not_by_flush(tmp_path):
    w = TraceWriter(tmp_path, "t", "run-1", flush_interval_s=0, window_s=3600, max_rows=5)
    for i in range(3):
        w.write(TurnRow(turn=i, phase="start", worker_id="w001"))
        w.flush()  # each flush rewrites the same window file
    files = sorted((tmp_path / "trace" / "turns").glob("*.parquet"))
    assert len(files) == 1 and pq.read_table(files[0]).num_rows == 3
    for i in range(3, 12):
        w.write(TurnRow(turn=i, phase="start", worker_id="w001"))
    w.close()
    files = sorted((tmp_path / "trace" / "turns").glob("*.parquet"))
    assert sum(pq.read_table(f).num_rows for f in files) == 12
    assert len(files) == 3  # windows of at most max_rows rows
    assert sorted(r["turn"] for f in files for r in pq.read_table(f).to_pylist()) == list(range(12))


def test_trace_rows_by_fields_match_rows_by_model(tmp_path):
    """The board's hot path (`write_fields`) lands the same columns as a model row, defaults included,
    and a field the table does not have is an error naming it (not a silently dropped value)."""
    w = TraceWriter(tmp_path, "t", "run-1", flush_interval_s=0)
    w.write(BoardRow(ts=1, worker_id="w001", event_id="board:1", seq=1, type="FACT", text="a"))
    w.write_fields("board", {"ts": 2, "worker_id": "w002", "event_id": "board:2", "seq": 2, "type": "CLAIM",
                             "text": "b", "has_detail": True})
    with pytest.raises(ValueError, match="no column.*'colour'"):
        w.write_fields("board", {"seq": 3, "colour": "red"})
    w.flush()
    w.write_fields("board", {"ts": 4, "worker_id": "w003", "event_id": "board:4", "seq": 4, "type": "FAIL",
                             "text": "c"})
    w.close()
    (f,) = (tmp_path / "trace" / "board").glob("*.parquet")
    rows = pq.read_table(f).to_pylist()
    assert [r["seq"] for r in rows] == [1, 2, 4]  # converted across two flushes, one window file
    assert {r["schema_version"] for r in rows} == {SCHEMA_VERSION}
    assert all(r["run_id"] == "run-1" for r in rows) and [r["has_detail"] for r in rows] == [False, True, False]


def test_the_sim_finishes_its_own_open_prs_a_handoff_lists(tmp_path):
    """A sim worker whose previous session died between opening a PR and merging it (its host or node was lost)
    merges that PR first: left open it would hold the run's end. Only its own open PRs, from the hand-off."""
    from agensh_ray import prompts
    from agensh_ray.config import SimConfig
    from agensh_ray.models import PullRequest
    from agensh_ray.render import fmt_pr
    from agensh_ray.sim.agent import SimAgent, SimSession
    from agensh_ray.sim.settings import SimSettings
    from agensh_ray.task import Task

    def pr(n, head, author, state):
        return fmt_pr(PullRequest(number=n, head=head, base="main", author=author, title=f"Add {n}", state=state,
                                     created_ts=0))

    prs = "\n".join(f"  {p}" for p in (pr(3, "w001/word-count", "w001", "open"), pr(5, "w001/title", "w001", "merged"),
                                       pr(7, "w002/upper", "w002", "open")))
    text = prompts.handoff("w001", "  (none)", prs, "")
    agent = SimAgent(SimSettings(SimConfig()), Task.load("textkit"))
    s = SimSession(session_id="s1", cwd=tmp_path, mcp_url="http://127.0.0.1:1/", worker="w001")
    agent._note_events(s, text)
    assert s.handed_prs == [(3, "w001/word-count")]


def test_hosts_without_room_are_said_to_be_queued():
    from agensh_ray.driver.health import queued_note

    assert queued_note({"h001": 2, "h004": 2}, 4.0) == ""  # they fit: being restarted
    note = queued_note({"h001": 2, "h004": 2}, 1.0)
    assert note == " (queued: 2 host(s) need 4 agent slots, 1 free; they start again when a node with room joins)"
