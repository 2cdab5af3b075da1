"""The report renders: on the committed fixtures (fast), and on a fresh 3-worker
demo run (slow, one per session), which a real browser then lays out at 1,400 px
(tests/browser.py). What a reader sees: human column names, durations and one money
format, the thresholds as computed, the claim text, a note on unpriced cost, a table
of contents whose links all land."""

from __future__ import annotations

import json
import re
import shutil
import threading
from pathlib import Path

import pytest

from agensh_ray.analysis import report
from agensh_ray.analysis.columns import LABELS
from tests.browser import CHROMIUM, layout

FIXTURES = Path(__file__).parent / "fixtures"
PLOTS = ["funnel", "roles", "dm_graph", "cost"]


def check_report(out: Path, runs: int) -> str:
    html = (out / "report.html").read_text()
    md = (out / "report.md").read_text()
    # self-contained: every plot inline, nothing fetched
    inline = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", html)
    per_run = len(PLOTS) * runs
    scores = 0 if "Too few checkpoints to plot the score over time for" in md and runs == 1 else 2
    assert len(inline) == per_run + scores + 2 * (runs > 1), \
        "score and time-to-score plots, side by side and the scaling curve, four per run"
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
    assert "| run_small | claude | 5 | 1.67 h | 70% | 33 min | 67 min | – | – | 6 | 4 | 2 | $4.51 | $1.13 |" in md
    assert "| run_empty | sim | 2 | 5 s | – | – | – | – | – | 0 | 0 | 0 | none recorded | – |" in md
    assert "## Side by side" in md
    for name in ("roles", "merges", "cost", "idle", "claims", "hotspots"):
        assert (out / "data" / "run_small" / f"{name}.csv").is_file()


def test_the_report_reads_like_a_report(tmp_path):
    out = tmp_path / "report"
    report.write_report([FIXTURES / "run_small"], out)
    html = (out / "report.html").read_text()
    md = (out / "report.md").read_text()
    # a table of contents whose every link lands on a heading
    toc = re.search(r"<nav class='toc'>(.*?)</nav>", html, re.DOTALL).group(1)
    targets = re.findall(r"href='#([^']+)'", toc)
    ids = set(re.findall(r"<h[23] id='([^']+)'", html))
    assert len(targets) >= 9 and set(targets) == ids
    assert all(f'<a id="{t}"></a>' in md for t in targets)
    # human column names, never snake_case; numbers right, text left
    headers = re.findall(r"<th class='(\w+)'[^>]*>([^<]*)</th>", html)
    assert headers and not [h for _, h in headers if re.fullmatch(r"[a-z0-9]+(_[a-z0-9]+)+", h)]
    assert ("number", "PRs authored") in headers and ("text", "worker") in headers
    # durations read as durations, money in one format
    assert "<td class='duration'>1.60 h</td>" in html and "<td class='duration'>40 min</td>" in html
    amounts = re.findall(r"\$[^\s<|]*", md)
    assert amounts and all(re.fullmatch(r"\$\d{1,3}(,\d{3})*\.\d\d", a) for a in amounts), amounts
    # the claims table says what was claimed
    assert "claim wc again: textkit/commands/wc.py and docs/wc.md" in md
    # roles: the thresholds exactly as computed (5 workers, 2 peer merges, 4 peer reviews)
    assert ("integrator**: merged at least 2 peers' PRs (the larger of 2 and 2 × 2 peer merges / 5 workers, "
            "rounded up)") in md
    assert "reviewed at least 2 peers' PRs (the larger of 2 and 2 × 4 peer reviews / 5 workers" in md
    assert "| w005 | idle | idle |" in md  # the idle worker is listed


def test_every_column_has_a_human_name():
    answers = report.analyse(FIXTURES / "run_small")
    missing = {(q, c) for q, a in answers.answers.items() for c in a.cols if c not in LABELS}
    assert not missing


def test_an_unpriced_run_says_its_cost_is_agent_reported(tmp_path):
    run = tmp_path / "run_small"
    shutil.copytree(FIXTURES / "run_small", run)
    cfg = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps(cfg | {"harness": "cmd:my-agent"}))
    out = tmp_path / "report"
    report.write_report([FIXTURES / "run_small", run], out)
    md = (out / "report.md").read_text()
    assert "| run_small | claude | 5 | 1.67 h | 70% | 33 min | 67 min | – | – | 6 | 4 | 2 | $4.51 | $1.13 |" in md
    assert "| run_small-2 | cmd:my-agent | 5 | 1.67 h | 70% | 33 min | 67 min | – | – | 6 | 4 | 2 | $0.50 † | $0.12 † |" in md
    assert "† Agent-reported cost: the price table has no row for the harness of run_small-2 (harness cmd:my-agent)" in md


def test_milestones_are_a_report_setting(tmp_path, capsys):
    out = tmp_path / "report"
    report.main([str(FIXTURES / "run_small"), "--out", str(out), "--milestones", "10,60"])
    md = (out / "report.md").read_text()
    assert "| time to 10% | time to 60% |" in md
    assert "| 10% | 17 min | 2 | 10 |" in md and "| 60% | 67 min | 6 | 10 |" in md
    with pytest.raises(SystemExit):
        report.main([str(FIXTURES / "run_small"), "--out", str(out), "--milestones", "50,150"])
    assert "--milestones takes percentages in (0, 100]" in capsys.readouterr().err


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
    if CHROMIUM:  # tests/test_analysis_browser.py says when it is missing
        seen = layout(out / "report.html", 1400)
        assert seen["too_wide"] == 0, seen["offenders"]
    answers = report.analyse(run_dir)
    # one clock: the schedule as configured (or less), every milestone inside it, set-up and scoring apart
    run = answers.run
    assert run["duration_s"] <= run["configured_s"] + 1e-6 and run["setup_wall_s"] >= 0 <= run["after_wall_s"]
    assert all(m["time_to_s"] is None or m["time_to_s"] <= run["duration_s"] + 1e-6
               for m in answers.answers["score_milestones"].dicts())
    merges = answers.answers["merges"].one()
    assert merges["opened"] == summary["prs_opened"] and merges["merged"] == summary["prs_merged"]
    assert merges["merge_conflicts"] == summary["merge_conflicts"]
    assert len(answers.answers["roles"].rows) == 3
    assert answers.answers["final_score"].one()["final_pass_rate"] == pytest.approx(summary["score"])
    assert summary["prs_opened"] > 0, "the run opened no PR: nothing below can be checked"
    hot = answers.answers["hotspots"].dicts()
    assert hot and hot[0]["prs"] >= 1, "the forge snapshots each PR's diff (table pr_changes)"
    assert any(h["path"].endswith("registry.py") for h in hot)
