"""The report as one self-contained HTML page: where it came from, a table of contents, the tables, then each
study's pictures embedded as data URIs, each with a sentence saying what it shows.

Nothing is fetched when the page opens (no links, scripts, fonts or style sheets from elsewhere), so
it can be mailed or archived and opens offline in any browser. It reads on a phone as on a wide screen: a wide
table scrolls sideways in its own box, and nothing else is wider than the window.
"""
from __future__ import annotations

import base64
import re
from html import escape

from pipeline.report.tables import Table

STYLE = """body{font-family:sans-serif;margin:1em auto;padding:0 1em;max-width:80em}
p,li,figcaption,summary{overflow-wrap:anywhere}.scroll{overflow-x:auto;max-width:100%;margin:1em 0}
table{border-collapse:collapse}th,td{padding:.2em .6em;border-bottom:1px solid #ddd}
th{text-align:left}td{text-align:right}td:first-child,td:nth-child(2),td:nth-child(3){text-align:left}
td.number{white-space:nowrap}
caption{text-align:left;font-weight:bold;padding:.4em 0;position:sticky;left:0;max-width:calc(100vw - 3em)}
.note,.source{color:#555;font-size:.9em}
img{max-width:100%;height:auto;display:block;margin:1em 0}nav li{margin:.15em 0}figure{margin:1em 0}
details{margin:0 0 1em}"""

# Image = (file name, caption, PNG): one picture as the page shows it; its file name is its anchor.
Image = tuple[str, str, bytes]

# A cell that is a number, with its interval or unit: "12.3 ± 4.5", "[+1.0, +3.0]", "96.4-97.8", "83%".
NUMBER = re.compile(r"[\d\s.,:;%±+\-−–—\[\]()]*\d[\d\s.,:;%±+\-−–—\[\]()]*")

# Columns a page shows right after the first two, whatever their place in the table: a verdict's word is what a
# reader comes for, and in a narrow window the columns at the right are the ones scrolled out of sight.
FIRST = ("verdict",)


def html_cell(text: str) -> str:
    """One cell; a number is kept on one line (class "number", white-space: nowrap), as a narrow window would
    otherwise break "12.3 ± 4.5" or "[+1.0, +3.0]" after any space and leave the parts on separate lines."""
    number = ' class="number"' if NUMBER.fullmatch(text) else ""
    return f"<td{number}>{escape(text)}</td>"


def _grid(table: Table, anchor: str = "") -> str:
    """The table itself in a box of its own that scrolls sideways when it is wider than the window, the FIRST
    columns moved to third place."""
    order = list(range(len(table.headers)))
    for name in FIRST:
        if name in table.headers and table.headers.index(name) > 2:
            order.remove(table.headers.index(name))
            order.insert(2, table.headers.index(name))
    head = "".join(f"<th>{escape(table.headers[i])}</th>" for i in order)
    rows = "".join("<tr>" + "".join(html_cell(row[i]) for i in order) + "</tr>\n" for row in table.rows)
    return (f'<div class="scroll"><table{anchor}><caption>{escape(table.title)}</caption><tr>{head}</tr>\n{rows}'
            "</table></div>")


def html_table(table: Table, anchor: str = "") -> str:
    """One table with its title as caption, its summary above and its notes below, and the values behind it
    (`table.detail`, each seed's) folded under it; `anchor` is its id, for the table of contents. A table without
    rows is one sentence instead, its title and why it is empty (its notes), not a row of headers over nothing."""
    anchor = f' id="{anchor}"' if anchor else ""
    if not table.rows:
        why = " ".join(table.notes) or "no rows."
        return f'<p class="empty"{anchor}><strong>{escape(table.title)}</strong>: none to show. {escape(why)}</p>\n'
    summary = f'<p class="summary">{escape(table.summary)}</p>' if table.summary else ""
    notes = "".join(f'<p class="note">{escape(n)}</p>' for n in table.notes if n != table.summary)
    detail = ""
    if table.detail is not None and table.detail.rows:
        detail = (f"<details><summary>{escape(table.detail.title)}</summary>{_grid(table.detail)}"
                  + "".join(f'<p class="note">{escape(n)}</p>' for n in table.detail.notes) + "</details>")
    return f"{summary}{_grid(table, anchor)}{notes}{detail}\n"


def html_image(name: str, caption: str, png: bytes) -> str:
    """A PNG embedded in the page itself, with its sentence as caption and alternative text; its file name (as
    `report --plots` writes it) names it too."""
    data = base64.b64encode(png).decode("ascii")
    anchor = "picture-" + re.sub(r"[^A-Za-z0-9_-]", "-", name.removesuffix(".png"))
    return (f'<figure id="{anchor}"><img alt="{escape(caption)}" src="data:image/png;base64,{data}"><figcaption>'
            f'{escape(caption)} <span class="note">({escape(name)})</span></figcaption></figure>\n')


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
