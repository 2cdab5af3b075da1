"""The report as a reader sees it: laid out by headless Chromium (Debian's `chromium`, which .ci/run
installs) in a 1,400 px window, no element may be wider than the viewport or stick out of it. On
the committed fixtures (two runs side by side) and on a synthetic 1,024-worker run (bench/synthetic_run.py,
shape SMALL: about 200k events, the last ~300 workers of the launch schedule never start). The
fresh demo run gets the same check in tests/test_analysis_report.py."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from agensh_ray.analysis import report
from bench.synthetic_run import SMALL, generate
from tests.browser import CHROMIUM, layout

FIXTURES = Path(__file__).parent / "fixtures"

if CHROMIUM is None and os.environ.get("CI"):
    raise RuntimeError("CI must install Chromium (apt-get install -y chromium): the report's layout test needs it")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium here (apt-get install -y chromium)")


def fits(html: Path, width: int = 1400) -> dict:
    seen = layout(html, width)
    assert seen["viewport"] <= width and seen["elements"] > 100, seen
    assert seen["too_wide"] == 0 and seen["scroll_width"] <= seen["viewport"], seen["offenders"]
    return seen


def test_the_fixture_report_fits_1400px(tmp_path):
    out = tmp_path / "report"
    report.write_report([FIXTURES / "run_small", FIXTURES / "run_empty"], out)
    fits(out / "report.html")


def test_a_1024_worker_report_fits_1400px(tmp_path):
    run = tmp_path / "bench"
    generate(run, 200_000, 20_000, shape=SMALL)
    out = tmp_path / "report"
    report.write_report([run], out)
    fits(out / "report.html")
    md = (out / "report.md").read_text()
    per_role = re.findall(r"^\| (integrator|reviewer|builder|scout|idle) \| ([\d,]+) \|", md, re.MULTILINE)
    assert sum(int(n.replace(",", "")) for _, n in per_role) == 1024  # every configured worker, in a role
    idle = dict(per_role).get("idle")
    assert idle and int(idle.replace(",", "")) >= 304  # at least the ones the schedule never started
    assert "; 304 workers never up." in md  # started at or after the 1.5-hour end: 1,024 - 120 - 600
    assert re.search(r"The 20 most active workers; every worker is counted in the table by role above\. "
                     r"[\d,]+ idle: w\d{4}", md)


def test_the_check_sees_an_overflowing_page(tmp_path):
    """The check itself: a table wider than the window is reported."""
    page = tmp_path / "wide.html"
    cells = "".join(f"<td>column_number_{i}</td>" for i in range(80))
    page.write_text(f"<!doctype html><html><body><table><tr>{cells}</tr></table></body></html>")
    seen = layout(page, 1400)
    assert seen["too_wide"] > 0 and seen["scroll_width"] > 1400
    assert any(o["tag"] == "table" for o in seen["offenders"])
