"""The report's document: blocks (headings, paragraphs, tables, fact cards, images) written once and
rendered both as Markdown (plots as PNG files beside it) and as one self-contained HTML page (plots
embedded, no script, no outside reference), with a table of contents linking every section.

The page is laid out for a reader at 1,400 px and narrower: tables fit the width (long free text
wraps, numbers stay on one line, right-aligned; short text left-aligned), one-row answers are a grid
of labelled values rather than a wide table, and every heading has an anchor.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field

from agensh_ray.analysis.answers import Answer
from agensh_ray.analysis.columns import cell, kind, label

TOP = 20
"""Rows shown per long table in the report (every row is in the CSV files)."""

LONG_TEXT = 28
"""A short-text cell longer than this wraps like free text."""

CSS = """
body{font:14px/1.45 system-ui,sans-serif;max-width:1180px;margin:0 auto;padding:1em 1.5em 4em;color:#222}
h1{margin-bottom:.2em}h2{border-bottom:1px solid #ddd;padding-bottom:.15em;margin-top:2.2em}
h3{margin:1.6em 0 .4em}a{color:#2456a6}
nav.toc{background:#f7f7f7;border:1px solid #e3e3e3;border-radius:4px;padding:.5em 1em;margin:1em 0;font-size:13px}
nav.toc ul{margin:.2em 0;padding-left:1.2em}nav.toc li{margin:.1em 0}
nav.toc li.run>a{font-weight:600}nav.toc li.run ul{display:flex;flex-wrap:wrap;gap:.2em 1em;list-style:none;padding:0}
table{border-collapse:collapse;font-size:13px;margin:.5em 0}
th,td{border:1px solid #ddd;padding:3px 7px;vertical-align:top}
th{background:#f3f3f3;text-align:left;font-weight:600}
td.number,td.duration,td.money,td.percent{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
th.number,th.duration,th.money,th.percent{text-align:right}
td.text{white-space:nowrap}td.prose{min-width:8em;max-width:34em;overflow-wrap:anywhere}
.facts{display:grid;grid-template-columns:repeat(auto-fill,minmax(10.5em,1fr));gap:6px;margin:.6em 0}
.fact{border:1px solid #e3e3e3;border-radius:4px;padding:4px 8px;overflow-wrap:anywhere}
.fact .v{display:block;font-size:17px;font-weight:600;font-variant-numeric:tabular-nums}
.fact .k{display:block;font-size:12px;color:#555}
img{max-width:100%;height:auto}p{max-width:60em}
.note{color:#555;font-size:12.5px}code{background:#f3f3f3;overflow-wrap:anywhere}
"""


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


@dataclass
class Doc:
    """Blocks rendered to both Markdown and HTML."""

    blocks: list[tuple] = field(default_factory=list)
    images: dict[str, bytes] = field(default_factory=dict)
    anchors: set[str] = field(default_factory=set)

    def h(self, level: int, text: str, anchor: str | None = None) -> str:
        """A heading; its anchor (unique in the document) is returned for links to it."""
        base = anchor or slug(text)
        a, n = base, 1
        while a in self.anchors:
            n += 1
            a = f"{base}-{n}"
        self.anchors.add(a)
        self.blocks.append(("h", level, text, a))
        return a

    def p(self, text: str, note: bool = False) -> None:
        """A paragraph; `code` in backticks."""
        self.blocks.append(("p", text, note))

    def table(self, cols: list[str], rows: list[list[str]], kinds: list[str] | None = None, note: str = "") -> None:
        """A table of already formatted cells; kinds (see columns.kind) set alignment and wrapping."""
        self.blocks.append(("table", cols, rows, kinds or ["text"] + ["number"] * (len(cols) - 1), note))

    def answer(self, a: Answer, csv_path: str, top: int | None = TOP, cols: list[str] | None = None,
               empty: str = "none", rows: list[tuple] | None = None) -> None:
        """An answer as a table: human column names, formatted cells, the first `top` rows (None: all)."""
        cols = cols or a.cols
        idx = [a.cols.index(c) for c in cols]
        rows = a.rows if rows is None else rows
        shown = rows if top is None else rows[:top]
        body = [[cell(a.cols[i], r[i]) for i in idx] for r in shown]
        note = f"{len(rows) - len(shown):,} more rows in `{csv_path}`" if len(shown) < len(rows) else ""
        self.table([label(c) for c in cols], body, [kind(c) for c in cols], note if rows else empty)

    def facts(self, a: Answer, cols: list[str] | None = None) -> None:
        """A one-row answer as labelled values."""
        one = a.one()
        self.blocks.append(("facts", [(label(c), cell(c, one[c])) for c in (cols or a.cols)]))

    def img(self, name: str, png: bytes, alt: str) -> None:
        self.images[name] = png
        self.blocks.append(("img", name, alt))

    def toc(self) -> None:
        """Where the table of contents goes (it lists every h2 and h3 after it)."""
        self.blocks.append(("toc",))

    def _toc_items(self, start: int) -> list[tuple[str, str, list[tuple[str, str]]]]:
        items: list[tuple[str, str, list[tuple[str, str]]]] = []
        for b in self.blocks[start:]:
            if b[0] == "h" and b[1] == 2:
                items.append((b[2], b[3], []))
            elif b[0] == "h" and b[1] == 3 and items:
                items[-1][2].append((b[2], b[3]))
        return items

    def markdown(self) -> str:
        out = []
        for i, b in enumerate(self.blocks):
            if b[0] == "h":
                out.append(f'<a id="{b[3]}"></a>\n\n' + "#" * b[1] + " " + b[2])
            elif b[0] == "p":
                out.append(f"_{b[1]}_" if b[2] else b[1])
            elif b[0] == "table":
                _, cols, rows, _, note = b
                if rows:
                    lines = ["| " + " | ".join(_md_cell(c) for c in cols) + " |",
                             "|" + "".join("---:|" if k in _RIGHT else "---|" for k in b[3])]
                    lines += ["| " + " | ".join(_md_cell(v) for v in r) + " |" for r in rows]
                    out.append("\n".join(lines))
                if note:
                    out.append(f"_{note}_")
            elif b[0] == "facts":
                out.append("\n".join(["| | |", "|---|---:|"] + [f"| {_md_cell(k)} | {_md_cell(v)} |" for k, v in b[1]]))
            elif b[0] == "img":
                out.append(f"![{b[2]}](img/{b[1]})")
            elif b[0] == "toc":
                lines = ["**Contents**", ""]
                for text, a, subs in self._toc_items(i):
                    lines.append(f"- [{text}](#{a})" + (": " if subs else "")
                                 + " · ".join(f"[{t}](#{s})" for t, s in subs))
                out.append("\n".join(lines))
        return "\n\n".join(out) + "\n"

    def html(self, title: str) -> str:
        out = ["<!doctype html><html lang='en'><head><meta charset='utf-8'>",
               "<meta name='viewport' content='width=device-width,initial-scale=1'>",
               f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>"]
        for i, b in enumerate(self.blocks):
            if b[0] == "h":
                out.append(f"<h{b[1]} id='{b[3]}'>{html.escape(b[2])}</h{b[1]}>")
            elif b[0] == "p":
                out.append(f"<p{' class=note' if b[2] else ''}>{_inline(b[1])}</p>")
            elif b[0] == "table":
                _, cols, rows, kinds, note = b
                if rows:
                    out.append("<table><thead><tr>" + "".join(
                        f"<th class='{k}'{_min_width(rows, j, k)}>{html.escape(str(c))}</th>"
                        for j, (c, k) in enumerate(zip(cols, kinds))) + "</tr></thead><tbody>")
                    out += ["<tr>" + "".join(_td(v, k) for v, k in zip(r, kinds)) + "</tr>" for r in rows]
                    out.append("</tbody></table>")
                if note:
                    out.append(f"<p class='note'>{_inline(note)}</p>")
            elif b[0] == "facts":
                out.append("<div class='facts'>" + "".join(
                    f"<div class='fact'><span class='v'>{html.escape(v)}</span><span class='k'>{html.escape(k)}</span></div>"
                    for k, v in b[1]) + "</div>")
            elif b[0] == "img":
                data = base64.b64encode(self.images[b[1]]).decode()
                out.append(f"<p><img alt='{html.escape(b[2], quote=True)}' src='data:image/png;base64,{data}'></p>")
            elif b[0] == "toc":
                items = []
                for text, a, subs in self._toc_items(i):
                    sub = "".join(f"<li><a href='#{s}'>{html.escape(t)}</a></li>" for t, s in subs)
                    items.append(f"<li class='{'run' if subs else ''}'><a href='#{a}'>{html.escape(text)}</a>"
                                 + (f"<ul>{sub}</ul>" if sub else "") + "</li>")
                out.append("<nav class='toc'><strong>Contents</strong><ul>" + "".join(items) + "</ul></nav>")
        out.append("</body></html>")
        return "\n".join(out) + "\n"


_RIGHT = {"number", "duration", "money", "percent"}


def _min_width(rows: list[list[str]], j: int, k: str) -> str:
    """Free text wraps at spaces, so its column is at least as wide as its longest word (up to
    LONG_TEXT characters; a longer word breaks anywhere)."""
    if k != "prose":
        return ""
    longest = max((len(w) for r in rows for w in str(r[j]).split()), default=0)
    return f" style='min-width:{min(longest, LONG_TEXT) * 0.62:.1f}em'"


def _td(v: str, k: str) -> str:
    if k == "text" and len(v) > LONG_TEXT:
        k = "prose"
    return f"<td class='{k}'>{html.escape(v)}</td>"


def _md_cell(s) -> str:
    """A Markdown table cell: pipes, backslashes, backticks and tags escaped, on one line."""
    s = str(s).replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`").replace("<", "&lt;")
    return " ".join(s.split())


def _inline(text: str) -> str:
    """A paragraph's text as HTML: `code` and **bold**."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", p)
                   for i, p in enumerate(parts))
