"""Tables as text files: Markdown, CSV, LaTeX, JSON or one HTML page, and which format a command writes."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from pipeline.errors import UserError, did_you_mean
from pipeline.report.html_report import Image, html_page
from pipeline.report.tables import Table

FORMATS = ("table", "markdown", "csv", "latex", "json", "html")
# File extensions that name a format: `--out` with one of them must agree with `--format`.
EXTENSIONS = {".md": "markdown", ".markdown": "markdown", ".csv": "csv", ".tex": "latex", ".json": "json",
              ".html": "html", ".htm": "html"}


def output_format(fmt: str | None, out: Path | None) -> str:
    """The format to write: `fmt`, else the one `out`'s extension names, else the terminal table.
    A `fmt` that differs from what the extension names is a UserError (the table goes to files as
    Markdown, so .md suits it)."""
    named = EXTENSIONS.get(out.suffix.lower()) if out is not None else None
    if fmt is None:
        return named or "table"
    if fmt not in FORMATS:
        raise UserError(f"unknown format {fmt!r}{did_you_mean(fmt, FORMATS)}; known: {', '.join(FORMATS)}")
    if named is not None and named != fmt and not (fmt == "table" and named == "markdown"):
        raise UserError(f"--out {out} names a {named} file but --format is {fmt}; "
                        f"pass --format {named} or give the file a .{fmt_extension(fmt)} name")
    return fmt


PLAIN_EXTENSIONS = ("", ".txt")  # text of any format


def check_extension(out: Path) -> None:
    """Refuse an `--out` whose extension names a format this tool does not write (x.docx, x.pdf): the file
    would hold text its name says it does not."""
    suffix = out.suffix.lower()
    if suffix not in EXTENSIONS and suffix not in PLAIN_EXTENSIONS:
        known = ", ".join(sorted(set(EXTENSIONS) | {".txt"}))
        raise UserError(f"--out {out}: a report is written as text, never as a {suffix} file; name it with one "
                        f"of {known}")


def fmt_extension(fmt: str) -> str:
    """The usual file extension of a format, without the dot."""
    return {"table": "md", "markdown": "md", "latex": "tex"}.get(fmt, fmt)


def render_text(tables: list[Table], fmt: str, images: dict[str, list[Image]] | None = None,
                source: str = "") -> str:
    """Markdown, CSV, LaTeX, JSON or HTML text for `tables` (the Rich table is drawn by the CLI);
    only HTML shows `images`, the (file name, caption, PNG) triples under each study's name, and `source`."""
    if fmt == "html":
        return html_page(tables, images, source=source)
    if fmt == "json":
        return json.dumps([{"title": t.title, "rows": t.records, "notes": t.notes} for t in tables], indent=2)
    parts = []
    for t in tables:
        if fmt == "markdown":
            lines = [f"**{t.title}**", "", "| " + " | ".join(t.headers) + " |",
                     "|" + "---|" * len(t.headers)] + ["| " + " | ".join(row) + " |" for row in t.rows]
            parts.append("\n".join(lines + [""] + t.notes))
        elif fmt == "csv":
            buffer = io.StringIO()
            writer = csv.writer(buffer)
            writer.writerow(t.headers)
            writer.writerows(t.rows)
            parts.append(buffer.getvalue().rstrip("\n"))
        elif fmt == "latex":
            def escape(text: str) -> str:
                return text.replace("\\", r"\textbackslash{}").replace("&", r"\&").replace("%", r"\%") \
                           .replace("_", r"\_").replace("#", r"\#").replace("±", r"$\pm$") \
                           .replace("~", r"\textasciitilde{}")
            lines = [r"\begin{table}[t]", r"\centering", rf"\caption{{{escape(t.title)}}}",
                     r"\begin{tabular}{" + "l" * 3 + "r" * (len(t.headers) - 3) + "}", r"\hline",
                     " & ".join(escape(h) for h in t.headers) + r" \\", r"\hline"]
            lines += [" & ".join(escape(c) for c in row) + r" \\" for row in t.rows]
            lines += [r"\hline", r"\end{tabular}", r"\end{table}"] + [f"% {escape(n)}" for n in t.notes]
            parts.append("\n".join(lines))
        else:
            raise UserError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    return "\n\n".join(parts) + "\n"
