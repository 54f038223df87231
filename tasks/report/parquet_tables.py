"""The report's aggregate tables as Parquet files, with explicit column types.

Columns are float64 unless named here as strings, booleans or (per table) integers, so a
file's schema is the same whether the table holds rows or is empty.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ape.tasks.stats.aggregate import OUTCOME_COLUMNS

INT_LEADERBOARD = {
    "rank",
    "n_items",
    "n_sessions",
    "runs_per_data",
    "check_errors",
    "cached",
    "batched",
    "rank_low",
    "rank_high",
    "tie_group",
    "injection_flags",
    "infrastructure_errors",
    *OUTCOME_COLUMNS.values(),
}
INT_PAIRWISE = {"n_items", "wins", "ties", "losses", "a_only", "b_only"}
_STRING_COLUMNS = {"model_id", "model_a", "model_b", "category", "test", "ci_method"}
_BOOL_COLUMNS = {"significant"}


def _frame_schema(frame: pd.DataFrame, ints: set[str]) -> pa.Schema:
    fields = []
    for column in frame.columns:
        if column in _STRING_COLUMNS:
            kind = pa.string()
        elif column in _BOOL_COLUMNS:
            kind = pa.bool_()
        elif column in ints:
            kind = pa.int64()
        else:
            kind = pa.float64()
        fields.append((column, kind))
    return pa.schema(fields)


def write_frame(frame: pd.DataFrame, path: Path, ints: Iterable[str] = ()) -> Path:
    """Write a report table with explicit column types (stable even when the table is empty)."""
    table = pa.Table.from_pandas(frame, schema=_frame_schema(frame, set(ints)), preserve_index=False)
    pq.write_table(table, path)
    return path
