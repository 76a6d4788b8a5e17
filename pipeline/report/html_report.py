"""The report as one self-contained HTML page: a table of contents, the tables, then each study's pictures
embedded as data URIs.

Nothing is fetched when the page opens (no links, scripts, fonts or style sheets from elsewhere), so
it can be mailed or archived and opens offline in any browser.
"""
from __future__ import annotations

import base64
import re
from html import escape

from pipeline.report.tables import Table

STYLE = """body{font-family:sans-serif;margin:2em;max-width:80em}
table{border-collapse:collapse;margin:1em 0}th,td{padding:.2em .6em;border-bottom:1px solid #ddd}
th{text-align:left}td{text-align:right}td:first-child,td:nth-child(2),td:nth-child(3){text-align:left}
td.number{white-space:nowrap}
caption{text-align:left;font-weight:bold;padding:.4em 0}.note{color:#555;font-size:.9em}
img{max-width:100%;display:block;margin:1em 0}nav li{margin:.15em 0}"""


# A cell that is a number, with its interval or unit: "12.3 ± 4.5", "[+1.0, +3.0]", "96.4-97.8", "83%".
NUMBER = re.compile(r"[\d\s.,:;%±+\-−–—\[\]()]*\d[\d\s.,:;%±+\-−–—\[\]()]*")


def html_cell(text: str) -> str:
    """One cell; a number is kept on one line (class "number", white-space: nowrap), as a narrow window would
    otherwise break "12.3 ± 4.5" or "[+1.0, +3.0]" after any space and leave the parts on separate lines."""
    number = ' class="number"' if NUMBER.fullmatch(text) else ""
    return f"<td{number}>{escape(text)}</td>"


def html_table(table: Table, anchor: str = "") -> str:
    """One table with its title as caption and its notes below; `anchor` is its id, for the table of contents.
    A table without rows is one sentence instead, its title and why it is empty (its notes), not a row of
    headers over nothing."""
    anchor = f' id="{anchor}"' if anchor else ""
    if not table.rows:
        why = " ".join(table.notes) or "no rows."
        return f'<p class="empty"{anchor}><strong>{escape(table.title)}</strong>: none to show. {escape(why)}</p>\n'
    head = "".join(f"<th>{escape(h)}</th>" for h in table.headers)
    rows = "".join("<tr>" + "".join(html_cell(c) for c in row) + "</tr>\n" for row in table.rows)
    notes = "".join(f'<p class="note">{escape(n)}</p>' for n in table.notes)
    return f"<table{anchor}><caption>{escape(table.title)}</caption><tr>{head}</tr>\n{rows}</table>{notes}\n"


def html_image(caption: str, png: bytes) -> str:
    """A PNG embedded in the page itself."""
    data = base64.b64encode(png).decode("ascii")
    return f'<figure><img alt="{escape(caption)}" src="data:image/png;base64,{data}"><figcaption>' \
           f'{escape(caption)}</figcaption></figure>\n'


def html_page(tables: list[Table], images: dict[str, list[tuple[str, bytes]]] | None = None,
              title: str = "robust-tune report") -> str:
    """The whole page: a table of contents, `tables` in order, then under one heading per key of `images` (a
    study, or a data set for shared traces) its (caption, PNG) pairs."""
    images = images or {}
    contents = [(f"table-{i + 1}", t.title) for i, t in enumerate(tables)]
    contents += [(f"pictures-{i + 1}", f"Pictures of {heading} ({len(pictures)})")
                 for i, (heading, pictures) in enumerate(images.items())]
    parts = [f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
             f"<style>{STYLE}</style></head><body>\n<h1>{escape(title)}</h1>\n"]
    if len(contents) > 1:
        parts.append('<nav><h2>Contents</h2><ul>' + "".join(f'<li><a href="#{anchor}">{escape(text)}</a></li>'
                                                              for anchor, text in contents) + "</ul></nav>\n")
    parts += [html_table(t, f"table-{i + 1}") for i, t in enumerate(tables)]
    for i, (heading, pictures) in enumerate(images.items()):
        parts.append(f'<h2 id="pictures-{i + 1}">Pictures of {escape(heading)}</h2>\n')
        parts += [html_image(caption, png) for caption, png in pictures]
    parts.append("</body></html>\n")
    return "".join(parts)
