"""Python twin of the total CSV reader (dpsql.measure.reader), written from its spec:
records split at \\n, \\r\\n or a lone \\r; decoded with errors="replace"; NUL/U+FFFF read
as U+FFFD; overlong records malformed; empty lines skipped (two or more fields); fields by the
dialect grammar; values by Attribute.index_of after the documented text conversions."""

from __future__ import annotations


import numpy as np

from dpsql.measure.reader import parse_number, split_fields, unquote
from dpsql.measure.source import CsvDialect


def records(data: bytes, d: CsvDialect) -> list[str]:
    text = data.decode(d.encoding, errors="replace")
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "\ufffd").replace("\uffff", "\ufffd")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return ["\uffff" if len(x.encode("utf-8")) > d.max_record_bytes else x for x in lines]


def cells(data: bytes, schema, d: CsvDialect = CsvDialect()) -> list[tuple[int, ...]]:
    lines = records(data, d)
    header = [unquote(f, d) for f in split_fields(lines[0], d)] if d.header else list(d.columns)
    out = []
    for line in lines[1:] if d.header else lines:
        if line == "" and len(header) > 1:
            continue            # an empty line is no one's record (docs/privacy.md §2)
        fields = None if line == "\uffff" else split_fields(line, d)
        if fields is not None and len(fields) != len(header):
            fields = None
        row = []
        for att in schema.attributes:
            if fields is None:
                row.append(att.invalid_index)
                continue
            raw = fields[header.index(att.name)]
            if raw in d.null:
                row.append(att.null_place)
                continue
            text = unquote(raw, d)
            if att.kind == "categorical" and att.python_type is str:
                row.append(att.index_of(text))
                continue
            x = parse_number(text)
            row.append(att.invalid_index if x is None else att.index_of(x))
        out.append(tuple(row))
    return out


def counts(data: bytes, schema, clique, d: CsvDialect = CsvDialect()) -> np.ndarray:
    return counts_all(data, schema, [clique], d)[tuple(clique)]


def counts_all(data: bytes, schema, cliques, d: CsvDialect = CsvDialect()) -> dict:
    rows = cells(data, schema, d)
    out = {}
    for clique in cliques:
        pos = [schema.column_names.index(a) for a in clique]
        arr = np.zeros(tuple(schema.domain[a] for a in clique), dtype=np.int64)
        for row in rows:
            arr[tuple(row[p] for p in pos)] += 1
        out[tuple(clique)] = arr
    return out


__all__ = ["records", "cells", "counts", "counts_all"]
