"""Look at a report the way a reader does: render it in headless Chromium (Debian's `chromium`) at a
given window width, and report every element that sticks out of the viewport; or take a screenshot
of the whole page.

    python -m tests.browser report/report.html --width 1400 --png shot.png

The page itself carries no script: the check adds one to a copy, which measures every element once
the page has loaded and writes the result into the DOM that `--dump-dom` prints.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
"""The browser, or None when none is installed (apt-get install -y chromium)."""

_CHECK = """<script>
addEventListener('load', () => {
  const vw = document.documentElement.clientWidth, bad = [];
  for (const el of document.body.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    if (r.right > vw + 0.5 || r.left < -0.5 || r.width > vw)
      bad.push({tag: el.tagName.toLowerCase(), cls: String(el.className), left: Math.round(r.left),
                right: Math.round(r.right), text: (el.textContent || '').slice(0, 80)});
  }
  const out = {viewport: vw, window: innerWidth, scroll_width: document.documentElement.scrollWidth,
               height: document.documentElement.scrollHeight, elements: document.body.querySelectorAll('*').length,
               offenders: bad.slice(0, 40), too_wide: bad.length};
  const pre = document.createElement('pre');
  pre.id = 'layout-check';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def _chromium(args: list[str], width: int, height: int, timeout: float = 120) -> str:
    if CHROMIUM is None:
        raise FileNotFoundError("no Chromium found: apt-get install -y chromium")
    with tempfile.TemporaryDirectory(prefix="agensh-chromium-") as profile:
        proc = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
             f"--user-data-dir={profile}", f"--window-size={width},{height}", "--virtual-time-budget=10000", *args],
            capture_output=True, text=True, timeout=timeout, check=False,
        )
    if proc.returncode != 0:
        raise RuntimeError(f"chromium exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc.stdout


def layout(html_file: Path, width: int = 1400, height: int = 1000) -> dict:
    """The page's layout at `width` px: viewport and page widths, page height, and the elements wider
    than the viewport or sticking out of it (`offenders`, `too_wide` counts them)."""
    page = Path(html_file).read_text()
    with tempfile.TemporaryDirectory(prefix="agensh-layout-") as tmp:
        probe = Path(tmp) / "probe.html"
        probe.write_text(page.replace("</body>", _CHECK + "</body>", 1))
        dom = _chromium(["--dump-dom", probe.as_uri()], width, height)
    m = re.search(r"<pre id=\"layout-check\">(.*?)</pre>", dom, re.DOTALL)
    if not m:
        raise RuntimeError(f"the layout check did not run in Chromium; page starts: {dom[:500]!r}")

    return json.loads(html.unescape(m.group(1)))


def screenshot(html_file: Path, png: Path, width: int = 1400, height: int | None = None) -> Path:
    """A PNG of the page at `width` px, the whole page tall unless `height` is given."""
    height = height or layout(html_file, width)["height"]
    _chromium([f"--screenshot={Path(png).resolve()}", "--hide-scrollbars", Path(html_file).resolve().as_uri()],
              width, height)
    return Path(png)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tests.browser", description=__doc__.splitlines()[0])
    ap.add_argument("html", type=Path, help="the report.html to look at")
    ap.add_argument("--width", type=int, default=1400, help="window width in px (default 1400)")
    ap.add_argument("--png", type=Path, default=None, help="also write a screenshot of the whole page here")
    args = ap.parse_args(argv)
    print(json.dumps(layout(args.html, args.width), indent=1, ensure_ascii=False))
    if args.png:
        print(f"wrote {screenshot(args.html, args.png, args.width)}")


if __name__ == "__main__":
    main()
