"""The report renders: on the committed fixtures (fast), and on a fresh 3-worker
demo run (slow, one per session)."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from agensh_ray.analysis import report

FIXTURES = Path(__file__).parent / "fixtures"
PLOTS = ["funnel", "roles", "dm_graph", "cost"]


def check_report(out: Path, runs: int) -> str:
    html = (out / "report.html").read_text()
    md = (out / "report.md").read_text()
    # self-contained: every plot inline, nothing fetched
    inline = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", html)
    per_run = len(PLOTS) * runs
    assert len(inline) == per_run + 2 + (runs > 1), "score and time-to-score plots, side by side, four per run"
    assert "src='http" not in html and "<script" not in html
    links = re.findall(r"!\[[^\]]*\]\((img/[^)]+)\)", md)
    assert len(links) == len(inline)
    for link in links:
        assert (out / link).read_bytes().startswith(b"\x89PNG")
    return md


def test_report_on_the_fixtures_side_by_side(tmp_path, capsys):
    out = tmp_path / "report"
    report.main([str(FIXTURES / "run_small"), str(FIXTURES / "run_empty"), "--out", str(out)])
    printed = capsys.readouterr().out
    assert str(out / "report.html") in printed and str(out / "report.md") in printed
    md = check_report(out, runs=2)
    assert "| run_small | claude | 5 | 1.67 h | 70.0% | 0.56 h | 1.11 h | 6 | 4 | 2 | $4.51 |" in md
    assert "## Side by side" in md
    for name in ("roles", "merges", "cost", "idle", "claims", "hotspots"):
        assert (out / "data" / "run_small" / f"{name}.csv").is_file()


def test_report_help_explains_itself(capsys):
    with pytest.raises(SystemExit):
        report.main(["--help"])
    assert "RUN_DIR" in capsys.readouterr().out


def test_report_refuses_a_folder_that_is_not_a_run(tmp_path, capsys):
    with pytest.raises(SystemExit):
        report.main([str(tmp_path), "--out", str(tmp_path / "out")])
    assert "no trace/ folder" in capsys.readouterr().err


@pytest.fixture(scope="session")
def fresh_demo_run(ray_session, tmp_path_factory):
    """One 3-worker sim run, shared by whatever needs it in this session."""
    from agensh_ray.config import RunConfig
    from agensh_ray.driver import Run
    from agensh_ray.task import Task

    run_dir = tmp_path_factory.mktemp("analysis-runs")
    # 8 schedule hours at 120x (4 wall minutes at most): room for a slow bootstrap on a busy box;
    # the run stops as soon as the work is done (stop_when_done), usually after about a minute.
    cfg = RunConfig(workers=3, time_scale=120, minutes=480, run_dir=run_dir, run_id="analysis", seed=3)
    result: dict = {}
    t = threading.Thread(target=lambda: result.setdefault("summary", Run(cfg, Task.load("textkit")).execute()),
                         daemon=True)
    t.start()
    t.join(timeout=420)
    assert not t.is_alive(), "the demo run did not finish in time"
    return run_dir / "analysis", result["summary"]


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_report_on_a_fresh_demo_run(fresh_demo_run, tmp_path):
    run_dir, summary = fresh_demo_run
    out = tmp_path / "report"
    report.write_report([run_dir], out)
    check_report(out, runs=1)
    answers = report.analyse(run_dir)
    merges = answers.answers["merges"].one()
    assert merges["opened"] == summary["prs_opened"] and merges["merged"] == summary["prs_merged"]
    assert merges["merge_conflicts"] == summary["merge_conflicts"]
    assert answers.answers["score_milestones"].one()["final_pass_rate"] == pytest.approx(summary["score"])
    assert len(answers.answers["roles"].rows) == 3
    assert summary["prs_opened"] > 0, "the run opened no PR: nothing below can be checked"
    hot = answers.answers["hotspots"].dicts()
    assert hot and hot[0]["prs"] >= 1, "the forge snapshots each PR's diff (table pr_changes)"
    assert any(h["path"].endswith("registry.py") for h in hot)
