"""Frames as Markdown and HTML tables, and the number formats reports share."""

from __future__ import annotations

import html

import polars as pl


def _cells(frame: pl.DataFrame) -> list[list[str]]:
    text = frame.select(pl.all().cast(pl.String).fill_null("-"))
    return [list(row) for row in text.iter_rows()]


def markdown_table(frame: pl.DataFrame) -> str:
    """A GitHub-flavoured Markdown table (``|`` in cells escaped)."""
    def escape(cell: str) -> str:
        return cell.replace("|", "\\|").replace("\n", " ")

    header = "| " + " | ".join(escape(c) for c in frame.columns) + " |"
    rule = "| " + " | ".join("---" for _ in frame.columns) + " |"
    rows = ["| " + " | ".join(escape(c) for c in row) + " |" for row in _cells(frame)]
    return "\n".join([header, rule, *rows])


def html_table(frame: pl.DataFrame, caption: str | None = None) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in frame.columns)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                   for row in _cells(frame))
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def percent(expr: pl.Expr, digits: int = 1) -> pl.Expr:
    """A share (0..1) as ``12.3 %`` text; ``-`` when null."""
    return pl.format("{} %", (100 * expr).round(digits)).fill_null("-")


def accuracy_table(job_table: pl.DataFrame, episode_table: pl.DataFrame | None = None
                   ) -> pl.DataFrame:
    """The paper's Tables 3 and 4 side by side: one row per detector, accuracy / FPR / FNR
    (with fractions) per category; with ``episode_table``, each category also gets culprit
    (localisation) and cause accuracy columns, over the attributed detections."""
    categories = list(dict.fromkeys(job_table["category"].to_list()))
    wide = job_table.select("detector", "category", "accuracy_text", "fpr_text", "fnr_text")
    if episode_table is not None:
        wide = wide.join(episode_table.select("detector", "category", "localisation_text",
                                              "cause_accuracy_text"),
                         on=["detector", "category"], how="left")
    out = wide.select("detector").unique(maintain_order=True)
    for category in categories:
        columns = {"accuracy_text": "accuracy", "fpr_text": "FPR", "fnr_text": "FNR",
                   "localisation_text": "culprit", "cause_accuracy_text": "cause"}
        part = wide.filter(pl.col("category") == category).select(
            "detector", *(pl.col(name).alias(f"{category}: {label}")
                          for name, label in columns.items() if name in wide.columns))
        out = out.join(part, on="detector", how="left")
    return out


def job_level_table(job_table: pl.DataFrame, episode_table: pl.DataFrame) -> pl.DataFrame:
    """One row per detector and category: jobs, accuracy / FPR / FNR with fractions, and the
    culprit and cause accuracy of its attributed detections."""
    return job_table.select(
        "detector", "category", "jobs", accuracy="accuracy_text", FPR="fpr_text",
        FNR="fnr_text",
    ).join(episode_table.select("detector", "category", culprit="localisation_text",
                                cause="cause_accuracy_text"),
           on=["detector", "category"], how="left", maintain_order="left")


def episode_accuracy_table(episode_table: pl.DataFrame) -> pl.DataFrame:
    """Episode-level precision, recall, delay (to the dated start), alarm delay (to the online
    report), localisation and cause accuracy per detector and category."""
    return episode_table.select(
        "detector", "category",
        pl.col("precision_text").alias("precision"),
        pl.col("recall_text").alias("recall"),
        pl.col("delay_iterations_median").round(1).alias("median delay (iterations)"),
        pl.col("delay_s_median").round(1).alias("median delay (s)"),
        pl.col("delay_s_max").round(1).alias("worst delay (s)"),
        pl.col("alarm_delay_iterations_median").round(1).alias("median alarm delay (iterations)"),
        pl.col("alarm_delay_s_median").round(1).alias("median alarm delay (s)"),
        pl.col("localisation_text").alias("culprit"),
        pl.col("cause_accuracy_text").alias("cause"),
    )


def cause_accuracy_table(cause_table: pl.DataFrame, detector: str) -> pl.DataFrame:
    """Per labeled cause, for one detector: fail-slows found, culprit right, cause right, each
    over all the labels of that cause."""
    return cause_table.filter(pl.col("detector") == detector).select(
        pl.col("cause").alias("labeled cause"), pl.col("labels").alias("fail-slows"),
        pl.col("recall_text").alias("found"), pl.col("culprit_text").alias("culprit right"),
        pl.col("cause_right_text").alias("cause right"))
