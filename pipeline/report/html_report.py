"""The report as one self-contained HTML page: where it came from, a table of contents, the tables, then each
study's pictures embedded as data URIs, each with a sentence saying what it shows.

Nothing is fetched when the page opens (no links, scripts, fonts or style sheets from elsewhere), so
it can be mailed or archived and opens offline in any browser. It reads in order, on a phone as on a wide screen:
a table's warnings first and plain to see, then the table, then what it says in words (a verdict's reading), then
its legend; a wide table scrolls sideways in its own box with its first column fixed and the column a reader comes
for (the verdict, the objective) moved beside it; a picture is never shrunk below nine tenths of its size (its
labels stay at 9 px or more: pipeline/report/plots.py draws none under 10) but scrolls in its own box; nothing else
is wider than the window.
"""
from __future__ import annotations

import base64
import re
import struct
from html import escape

from pipeline.report.tables import Table

STYLE = """body{font-family:sans-serif;margin:1em auto;padding:0 1em;max-width:80em}
p,li,figcaption,summary{overflow-wrap:anywhere}.scroll{overflow-x:auto;max-width:100%;margin:1em 0}
table{border-collapse:collapse}th,td{padding:.2em .6em;border-bottom:1px solid #ddd;background:#fff}
th{text-align:left}td{text-align:right}td:first-child,td:nth-child(2),td:nth-child(3){text-align:left}
th:first-child,td:first-child{position:sticky;left:0;z-index:1;min-width:6em;max-width:12em;box-shadow:1px 0 #ddd}
td.number{white-space:nowrap}
caption{text-align:left;font-weight:bold;padding:.4em 0;position:sticky;left:0;max-width:calc(100vw - 3em)}
.note,.source{color:#555;font-size:.9em}
.warning{border-left:.3em solid #b45309;background:#fff7ed;padding:.3em .6em;margin:.4em 0}
.summary{font-weight:bold}
img{max-width:100%;height:auto;display:block;margin:0 0 .5em}
nav li{margin:.15em 0}details{margin:0 0 1em}"""

# Image = (file name, caption, PNG): one picture as the page shows it; its file name is its anchor.
Image = tuple[str, str, bytes]

# A cell that is a number, with its interval or unit: "12.3 ± 4.5", "[+1.0, +3.0]", "96.4-97.8", "83%".
NUMBER = re.compile(r"[\d\s.,:;%±+\-−–—\[\]()]*\d[\d\s.,:;%±+\-−–—\[\]()]*")

# Columns a page shows right after the first two, whatever their place in the table: a verdict's word (and a table's
# `key`, its objective) is what a reader comes for, and in a narrow window the columns at the right are the ones
# scrolled out of sight.
FIRST = ("verdict",)
SHRINK = 0.9  # the least share of its size a picture is shown at (its smallest label at 10 px stays at 9)


def html_cell(text: str) -> str:
    """One cell; a number is kept on one line (class "number", white-space: nowrap), as a narrow window would
    otherwise break "12.3 ± 4.5" or "[+1.0, +3.0]" after any space and leave the parts on separate lines."""
    number = ' class="number"' if NUMBER.fullmatch(text) else ""
    return f"<td{number}>{escape(text)}</td>"


def _grid(table: Table, anchor: str = "") -> str:
    """The table itself in a box of its own that scrolls sideways when it is wider than the window, the FIRST
    columns moved to third place."""
    order = list(range(len(table.headers)))
    for name in (*FIRST, *([table.key] if table.key else [])):
        if name in table.headers and table.headers.index(name) > 2:
            order.remove(table.headers.index(name))
            order.insert(2, table.headers.index(name))
    head = "".join(f"<th>{escape(table.headers[i])}</th>" for i in order)
    rows = "".join("<tr>" + "".join(html_cell(row[i]) for i in order) + "</tr>\n" for row in table.rows)
    return (f'<div class="scroll"><table{anchor}><caption>{escape(table.title)}</caption><tr>{head}</tr>\n{rows}'
            "</table></div>")


WARNING = "Warning: "  # a note that starts so is a warning: the page shows it first, plain to see


def html_table(table: Table, anchor: str = "") -> str:
    """One table in reading order: its warnings (notes starting "Warning: ") first and plain to see, the table with
    its title as caption, its summary (what it says in words), its other notes (the legend), and the values behind
    it (`table.detail`, each seed's) folded under it; `anchor` is its id, for the table of contents. A table without
    rows is one sentence instead, its title and why it is empty (its notes), not a row of headers over nothing."""
    anchor = f' id="{anchor}"' if anchor else ""
    if not table.rows:
        why = " ".join(table.notes) or "no rows."
        return f'<p class="empty"{anchor}><strong>{escape(table.title)}</strong>: none to show. {escape(why)}</p>\n'
    warned = [n for n in table.notes if n.startswith(WARNING)]
    warnings = "".join(f'<p class="warning">{escape(n)}</p>' for n in warned)
    summary = f'<p class="summary">{escape(table.summary)}</p>' if table.summary else ""
    notes = "".join(f'<p class="note">{escape(n)}</p>' for n in table.notes if n != table.summary and n not in warned)
    detail = ""
    if table.detail is not None and table.detail.rows:
        detail = (f"<details><summary>{escape(table.detail.title)}</summary>{_grid(table.detail)}"
                  + "".join(f'<p class="note">{escape(n)}</p>' for n in table.detail.notes) + "</details>")
    return f"<section{anchor}>{warnings}{_grid(table)}{summary}{notes}{detail}</section>\n"


def html_image(name: str, caption: str, png: bytes) -> str:
    """A PNG embedded in the page itself, with its sentence as caption and alternative text; its file name (as
    `report --plots` writes it) names it too."""
    data = base64.b64encode(png).decode("ascii")
    anchor = "picture-" + re.sub(r"[^A-Za-z0-9_-]", "-", name.removesuffix(".png"))
    width, height = struct.unpack(">II", png[16:24])  # the PNG's IHDR: its size in pixels
    size = f' width="{width}" height="{height}" style="min-width:{round(SHRINK * width)}px"'
    return (f'<figure class="scroll" id="{anchor}"><img alt="{escape(caption)}"{size} '
            f'src="data:image/png;base64,{data}"><figcaption>{escape(caption)} <span class="note">({escape(name)})'
            "</span></figcaption></figure>\n")


def html_page(tables: list[Table], images: dict[str, list[Image]] | None = None,
              title: str = "robust-tune report", source: str = "") -> str:
    """The whole page: `source` (which version drew it, when, from which database), a table of contents, `tables`
    in order, then under one heading per key of `images` (a study, or a data set for shared traces) its
    pictures."""
    images = images or {}
    contents = [(f"table-{i + 1}", t.title) for i, t in enumerate(tables)]
    contents += [(f"pictures-{i + 1}", f"Pictures of {heading} ({len(pictures)})")
                 for i, (heading, pictures) in enumerate(images.items())]
    parts = [f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
             f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{escape(title)}</title>'
             f"<style>{STYLE}</style></head><body>\n<h1>{escape(title)}</h1>\n"]
    if source:
        parts.append(f'<p class="source">{escape(source)}</p>\n')
    if len(contents) > 1:
        parts.append('<nav><h2>Contents</h2><ul>' + "".join(f'<li><a href="#{anchor}">{escape(text)}</a></li>'
                                                              for anchor, text in contents) + "</ul></nav>\n")
    parts += [html_table(t, f"table-{i + 1}") for i, t in enumerate(tables)]
    for i, (heading, pictures) in enumerate(images.items()):
        parts.append(f'<h2 id="pictures-{i + 1}">Pictures of {escape(heading)}</h2>\n')
        parts += [html_image(name, caption, png) for name, caption, png in pictures]
    parts.append("</body></html>\n")
    return "".join(parts)
