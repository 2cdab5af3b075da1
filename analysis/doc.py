"""The report's document: blocks (headings, paragraphs, tables, images) written once and rendered
both as Markdown (plots as PNG files beside it) and as a self-contained HTML page (plots
embedded), with the cell formatting both share.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import math
from dataclasses import dataclass, field

from agensh_ray.analysis.answers import Answer

TOP = 20
"""Rows shown per table in the report (every row is in the CSV files)."""


def fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if math.isnan(v):
            return "–"
        if v == int(v) and abs(v) < 1e12:
            return f"{int(v):,}"
        return f"{v:,.3f}" if abs(v) < 1000 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, dt.datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S")
    return str(v)


def hours(s) -> str:
    return "–" if s is None else f"{s / 3600:.2f} h"


def pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def money(x) -> str:
    return "–" if x is None else f"${x:,.2f}"


@dataclass
class Doc:
    """Blocks rendered to both Markdown and HTML."""

    blocks: list[tuple] = field(default_factory=list)
    images: dict[str, bytes] = field(default_factory=dict)

    def h(self, level: int, text: str) -> None:
        self.blocks.append(("h", level, text))

    def p(self, text: str) -> None:
        self.blocks.append(("p", text))

    def table(self, cols: list[str], rows: list[list], note: str = "") -> None:
        self.blocks.append(("table", cols, rows, note))

    def answer(self, a: Answer, csv_path: str, top: int = TOP, cols: list[str] | None = None,
               empty: str = "none") -> None:
        cols = cols or a.cols
        idx = [a.cols.index(c) for c in cols]
        rows = [[fmt(r[i]) for i in idx] for r in a.rows[:top]]
        note = f"{len(a.rows) - top:,} more rows in `{csv_path}`" if len(a.rows) > top else ""
        if not a.rows:
            note = empty
        self.table(cols, rows, note)

    def img(self, name: str, png: bytes, alt: str) -> None:
        self.images[name] = png
        self.blocks.append(("img", name, alt))

    def markdown(self) -> str:
        out = []
        for b in self.blocks:
            if b[0] == "h":
                out.append("#" * b[1] + " " + b[2])
            elif b[0] == "p":
                out.append(b[1])
            elif b[0] == "table":
                _, cols, rows, note = b
                if rows:
                    cell = lambda s: str(s).replace("|", "\\|").replace("\n", " ")  # noqa: E731
                    lines = ["| " + " | ".join(cell(c) for c in cols) + " |", "|" + "---|" * len(cols)]
                    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
                    out.append("\n".join(lines))
                if note:
                    out.append(f"_{note}_")
            elif b[0] == "img":
                out.append(f"![{b[2]}](img/{b[1]})")
        return "\n\n".join(out) + "\n"

    def html(self, title: str) -> str:
        out = [
            "<!doctype html><html><head><meta charset='utf-8'>",
            f"<title>{html.escape(title)}</title><style>",
            "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}",
            "table{border-collapse:collapse;font-size:13px;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px}",
            "th{background:#f3f3f3}td{text-align:right}td:first-child{text-align:left}img{max-width:100%}",
            ".note{color:#666;font-size:12px;font-style:italic}code{background:#f3f3f3}",
            "</style></head><body>",
        ]
        for b in self.blocks:
            if b[0] == "h":
                out.append(f"<h{b[1]}>{html.escape(b[2])}</h{b[1]}>")
            elif b[0] == "p":
                out.append(f"<p>{_inline(b[1])}</p>")
            elif b[0] == "table":
                _, cols, rows, note = b
                if rows:
                    out.append("<table><tr>" + "".join(f"<th>{html.escape(str(c))}</th>" for c in cols) + "</tr>")
                    out += ["<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in r) + "</tr>" for r in rows]
                    out.append("</table>")
                if note:
                    out.append(f"<p class='note'>{_inline(note)}</p>")
            elif b[0] == "img":
                data = base64.b64encode(self.images[b[1]]).decode()
                out.append(f"<p><img alt='{html.escape(b[2])}' src='data:image/png;base64,{data}'></p>")
        out.append("</body></html>")
        return "\n".join(out) + "\n"


def _inline(text: str) -> str:
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))
