"""A report as data (sections of text, tables and figures) and its two renderings.

The builders (:mod:`tracekit.report.job`, :mod:`tracekit.report.corpus`) only say *what* a
report holds; :func:`write_report` writes it as a Markdown page with its figures beside it
(``figures/*.png`` and ``*.svg``) and as one self-contained HTML page (figures inlined as SVG),
so the HTML can be mailed or attached to a ticket on its own.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
from matplotlib.figure import Figure

from tracekit.core.dataset import atomic_path
from tracekit.report.tables import html_table, markdown_table

FIGURE_DPI = 110
"""PNG resolution: sharp on screen, small enough to keep a corpus report in a few MB."""


@dataclass
class ReportFigure:
    """A figure with the file stem it is saved under and the caption a reader sees."""

    name: str
    figure: Figure
    caption: str


@dataclass
class ReportTable:
    """A table with its caption; the frame is printed as it is (format numbers before)."""

    caption: str
    frame: pl.DataFrame


@dataclass
class Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)
    items: list[str] = field(default_factory=list)
    """A bulleted list after the paragraphs (the evidence of a verdict)."""
    lead: bool = False
    """Paragraphs set larger and bold: the verdict a reader reads first."""
    tables: list[ReportTable] = field(default_factory=list)
    figures: list[ReportFigure] = field(default_factory=list)


@dataclass
class Report:
    title: str
    sections: list[Section] = field(default_factory=list)

    def section(self, title: str) -> Section:
        """A new section, appended in order."""
        created = Section(title)
        self.sections.append(created)
        return created

    @property
    def figures(self) -> list[ReportFigure]:
        return [f for s in self.sections for f in s.figures]


@dataclass(frozen=True)
class WrittenReport:
    """Where a report went."""

    folder: Path
    html: Path
    markdown: Path
    figures: list[Path]


def _svg_text(figure: Figure, path: Path) -> str:
    figure.savefig(path, format="svg", bbox_inches="tight")
    text = path.read_text()
    return text[text.index("<svg"):]


def write_report(report: Report, folder: str | Path) -> WrittenReport:
    """Write ``report.md``, ``index.html`` and ``figures/`` under ``folder`` (created when
    missing; files of the same names are replaced atomically)."""
    folder = Path(folder)
    figures_dir = folder / "figures"
    figures_dir.mkdir(parents=True, exist_ok=True)
    written, svgs = [], {}
    for item in report.figures:
        png, svg = figures_dir / f"{item.name}.png", figures_dir / f"{item.name}.svg"
        with atomic_path(png) as temporary:
            item.figure.savefig(temporary, format="png", dpi=FIGURE_DPI, bbox_inches="tight")
        with atomic_path(svg) as temporary:
            svgs[item.name] = _svg_text(item.figure, temporary)
        written += [png, svg]
    markdown, page = folder / "report.md", folder / "index.html"
    with atomic_path(markdown) as temporary:
        temporary.write_text(render_markdown(report))
    with atomic_path(page) as temporary:
        temporary.write_text(render_html(report, svgs))
    return WrittenReport(folder, page, markdown, written)


def render_markdown(report: Report) -> str:
    lines = [f"# {report.title}", ""]
    for section in report.sections:
        lines += [f"## {section.title}", ""]
        for paragraph in section.paragraphs:
            lines += [paragraph, ""]
        if section.items:
            lines += [f"- {item}" for item in section.items] + [""]
        for table in section.tables:
            lines += [f"**{table.caption}**", "", markdown_table(table.frame), ""]
        for item in section.figures:
            lines += [f"![{item.caption}](figures/{item.name}.png)", "", f"*{item.caption}*",
                      ""]
    return "\n".join(lines)


_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }
h1 { border-bottom: 2px solid #444; } h2 { margin-top: 2em; border-bottom: 1px solid #ccc; }
div.table { max-width: 100%; overflow-x: auto; margin: 0.5em 0 1.5em; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.6em; text-align: right; }
th { background: #eee; } td:first-child, th:first-child { text-align: left; }
figure { margin: 1em 0 2em; } figure svg { max-width: 100%; height: auto; }
p.lead { font-size: 1.15em; font-weight: 600; }
figcaption, caption { font-style: italic; color: #555; caption-side: top; text-align: left; }
"""


def render_html(report: Report, svgs: dict[str, str]) -> str:
    """One self-contained page: no external files, scripts or fonts."""
    title = html.escape(report.title)
    body = [f"<h1>{title}</h1>"]
    for section in report.sections:
        body.append(f"<h2>{html.escape(section.title)}</h2>")
        tag = '<p class="lead">' if section.lead else "<p>"
        body += [f"{tag}{html.escape(p)}</p>" for p in section.paragraphs]
        if section.items:
            body.append("<ul>" + "".join(f"<li>{html.escape(i)}</li>" for i in section.items)
                        + "</ul>")
        body += [html_table(t.frame, t.caption) for t in section.tables]
        for item in section.figures:
            body.append(f'<figure id="{html.escape(item.name)}">{svgs[item.name]}'
                        f"<figcaption>{html.escape(item.caption)}</figcaption></figure>")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}'
            f"</title><style>{_STYLE}</style></head><body>\n" + "\n".join(body)
            + "\n</body></html>\n")
