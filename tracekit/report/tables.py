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
    return (f'<div class="table"><table>{cap}<thead><tr>{head}</tr></thead><tbody>{rows}'
            "</tbody></table></div>")


def with_percent_sign(expr: pl.Expr) -> pl.Expr:
    """A rate with its fraction as scoring writes it, ``99.1 (106/107)``, as
    ``99.1 % (106/107)``."""
    return expr.str.replace(r"^(-?[\d.]+) \(", "$1 % (")


def percent(expr: pl.Expr, digits: int = 1) -> pl.Expr:
    """A share (0..1) as ``12.3 %`` text; ``-`` when null."""
    return pl.format("{} %", (100 * expr).round(digits)).fill_null("-")


def _shown_categories(table: pl.DataFrame) -> list[str]:
    """The categories of an accuracy table, without the pooled ``all`` when it only repeats
    the one category there is."""
    categories = list(dict.fromkeys(table["category"].to_list()))
    return [c for c in categories if c != "all"] if len(categories) == 2 and "all" in categories \
        else categories


ACCURACY_COLUMNS = {"accuracy_text": "accuracy", "fpr_text": "FPR", "fnr_text": "FNR",
                    "localisation_text": "culprit", "cause_accuracy_text": "cause"}


def accuracy_tables(job_table: pl.DataFrame, episode_table: pl.DataFrame | None = None
                    ) -> dict[str, pl.DataFrame]:
    """The paper's Tables 3 and 4, one narrow table per category (a table with every category
    side by side runs past the page): a row per detector, accuracy / FPR / FNR with their
    fractions and, with ``episode_table``, the culprit (localisation) and cause accuracy of
    the attributed detections. The pooled ``all`` is left out when it is the only category
    again."""
    wide = job_table.select("detector", "category", *[c for c in ACCURACY_COLUMNS
                                                      if c in job_table.columns])
    if episode_table is not None:
        wide = wide.join(episode_table.select("detector", "category", "localisation_text",
                                              "cause_accuracy_text"),
                         on=["detector", "category"], how="left", maintain_order="left")
    categories = _shown_categories(job_table)
    return {category: wide.filter(pl.col("category") == category).select(
        "detector", *(with_percent_sign(pl.col(name)).alias(label)
                      for name, label in ACCURACY_COLUMNS.items() if name in wide.columns))
        for category in categories}


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
    report), localisation and cause accuracy per detector and category (medians; ``it`` is
    iterations)."""
    return episode_table.filter(pl.col("category").is_in(_shown_categories(episode_table))).select(
        "detector", "category",
        with_percent_sign(pl.col("precision_text")).alias("precision"),
        with_percent_sign(pl.col("recall_text")).alias("recall"),
        pl.col("delay_iterations_median").round(1).alias("delay (it)"),
        pl.col("delay_s_median").round(1).alias("delay (s)"),
        pl.col("delay_s_max").round(1).alias("worst delay (s)"),
        pl.col("alarm_delay_iterations_median").round(1).alias("alarm delay (it)"),
        pl.col("alarm_delay_s_median").round(1).alias("alarm delay (s)"),
        with_percent_sign(pl.col("localisation_text")).alias("culprit"),
        with_percent_sign(pl.col("cause_accuracy_text")).alias("cause"),
    )


def cause_accuracy_table(cause_table: pl.DataFrame, detector: str) -> pl.DataFrame:
    """Per labeled cause, for one detector: fail-slows found, culprit right, cause right, each
    over all the labels of that cause."""
    return cause_table.filter(pl.col("detector") == detector).select(
        pl.col("cause").alias("labeled cause"), pl.col("labels").alias("fail-slows"),
        with_percent_sign(pl.col("recall_text")).alias("found"),
        with_percent_sign(pl.col("culprit_text")).alias("culprit right"),
        with_percent_sign(pl.col("cause_right_text")).alias("cause right"))
