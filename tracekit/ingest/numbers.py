"""Numbers as training frameworks print them: text to finite floats, and JSON objects of fields.

Logs print ``nan``, ``inf``, ``N/A`` or torn digits where a number belongs. Readers keep such a
field as null rather than dropping the row, and count how many they nulled so the ingest summary
says so (DESIGN.md: nothing lost silently).
"""

from __future__ import annotations

import polars as pl


def finite_number(text: pl.Expr) -> pl.Expr:
    """``text`` as Float64; null where it is not a number or not finite (nan, inf, N/A)."""
    value = text.str.strip_chars().cast(pl.Float64, strict=False)
    return pl.when(value.is_finite()).then(value)


def is_bad_number(text: pl.Expr) -> pl.Expr:
    """True where ``text`` holds something that :func:`finite_number` turns into null."""
    return text.is_not_null() & (text.str.strip_chars() != "") & finite_number(text).is_null()


def bad_number_note(counts: dict[str, int]) -> list[str]:
    """A summary note naming each field that had values kept as null, with how many."""
    counts = {field: n for field, n in counts.items() if n}
    if not counts:
        return []
    fields = ", ".join(f"{field} x{n}" for field, n in sorted(counts.items()))
    return [f"{sum(counts.values())} values were not finite numbers (nan, inf, N/A) and are kept "
            f"as null: {fields}"]


def json_objects(pairs: pl.DataFrame, by: str, key: str = "key",
                 value: str = "value") -> pl.DataFrame:
    """One JSON object per ``by`` from long ``(by, key, value)`` rows, value a Float64 (null
    becomes JSON null). Returns ``by`` and ``json``; ``by`` values without pairs are absent."""
    quoted_key = pl.concat_str(
        pl.lit('"'), pl.col(key).str.replace_all("\\", "\\\\", literal=True)
        .str.replace_all('"', '\\"', literal=True), pl.lit('"'))
    number = pl.col(value).cast(pl.String).fill_null("null")
    return (
        pairs.select(pl.col(by), pl.concat_str(quoted_key, pl.lit(": "), number).alias("_pair"))
        .group_by(by, maintain_order=True)
        .agg(pl.col("_pair").str.join(", "))
        .select(pl.col(by), pl.concat_str(pl.lit("{"), pl.col("_pair"), pl.lit("}")).alias("json"))
    )


NON_FINITE_JSON = r"(:\s*)-?(?:NaN|Infinity)\b"
"""Python's json writes non-finite floats as bare NaN / Infinity, which JSON forbids."""


def tagged_json(lines: pl.DataFrame, tag: str) -> pl.DataFrame:
    """The ``lines`` that hold ``tag`` (``:::MLLOG``, ``DLLL``), with ``json``, the record after
    it, and ``_json``, that record with non-finite numbers as null so JSON paths read it."""
    return lines.filter(pl.col("line").str.contains(tag, literal=True)).with_columns(
        pl.col("line").str.split_exact(tag, 1).struct.field("field_1").str.strip_chars()
        .alias("json"),
    ).with_columns(pl.col("json").str.replace_all(NON_FINITE_JSON, "${1}null").alias("_json"))
