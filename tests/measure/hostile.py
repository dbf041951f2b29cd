"""A small clean table and hostile single-row edits (shared by the reader tests, the
neighbouring-datasets property test and bench/neighbours.py)."""

from __future__ import annotations

import random

from dpsql.domain import Categorical, IntegerRange, Numeric, TableSchema

SCHEMA = TableSchema("t", (
    IntegerRange("age", 17, 90, bin_width=10),
    Categorical("sex", ["F", "M"], closed=True),
    Categorical("race", ["White", "Black"]),                  # open: an other cell
    Categorical("code", [1, 2, 3], nullable=True),            # integer labels
    Numeric("ratio", [0.0, 0.5, 1.0], nullable=True),
    Categorical("city", ["Zürich", "Genève"], nullable=True, closed=True),
))
HEADER = b"age,sex,race,code,ratio,city"
CLIQUES = [("age",), ("sex",), ("race",), ("code",), ("ratio",), ("city",), ("age", "sex"),
           ("race", "code", "ratio"), ("sex", "city"), ()]

# Each case of issue 15 (items 1-2) and the property test's hostile content: one record's bytes.
HOSTILE = [
    b"NA,F,White,1,0.2,Z\xc3\xbcrich", b"?,M,Black,2,0.1,", b"-,F,White,3,0.3,", b" ,F,White,1,0.1,",
    b"abc,F,White,1,0.1,", b"40,F,White,abc,0.1,", b"40,F,White,x1,0.1,", b"40,F,White,1,NaN,",
    b"40,F,White,1,inf,", b"40,F,White,1,-inf,", b"1e999,F,White,1,1e-999,", b"9" * 400 + b",M,Black,2,0.9,",
    b"40,\xff\xfe,White,1,0.1,", b"40,F,Wh\xe9ite,1,0.1,Gen\xe8ve", b"40,F,White,1,0.1,,extra",
    b"40,F,White", b"", b",,,,,", b'"40,F,White,1,0.1,', b'40,"F,White,1,0.1,', b'40,F"x,White,1,0.1,',
    b'"4""0",F,White,1,0.1,', b'40,"F"x,White,1,0.1,', b"\x00\x00\x00", b"40\x00,F,White,1,0.1,",
    b"\xef\xbf\xbf", b"40,F,White,1,0.1,\xef\xbb\xbf", b"40;F;White;1;0.1;", b"#40,F,White,1,0.1,",
    b"40,F,White,1," + b"7" * (1 << 20), b"x" * ((4 << 20) + 10), b'40,F,"' + b"a,\"\"" * (1 << 18) + b'",1,0.1,',
    b'40,F,"' + b"a" * (1 << 20), b"40,M,Black,99999999999999999999999,0.5,",
    b"40.5,F,White,1.0,0.5,", b"-40,F,White,-1,-0.5,", b"1_000,F,White,0x1,1e5,", b"  40  ,F,White, 2 ,.5,",
    b"\t40,F,White,1,0.1,", b'"",F,"","","",""', b"NULL,F,White,NULL,NULL,NULL", "40,f,white,1,0.1,zürich".encode(),
]


def clean_rows(n: int, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        age = rng.choice([str(rng.randint(17, 90)), str(rng.randint(17, 90))])
        out.append(",".join([age, rng.choice("FM"), rng.choice(["White", "Black", "Asian"]),
                             rng.choice(["1", "2", "3", ""]), rng.choice(["0.1", "0.5", "0.75", "", "1"]),
                             rng.choice(["Zürich", "Genève", ""])]).encode())
    return out


def random_record(rng: random.Random) -> bytes:
    """Hostile content for one record: a known case, random bytes (no line break: a record
    is one line), or a mutation of a clean row."""
    kind = rng.randrange(4)
    if kind == 0:
        return rng.choice(HOSTILE)
    if kind == 1:
        n = rng.choice([0, 1, 2, 5, 20, 200])
        return bytes(b for b in rng.randbytes(n) if b not in (10, 13))
    row = bytearray(clean_rows(1, rng.randrange(10**6))[0])
    for _ in range(rng.randint(1, 4)):
        pos = rng.randrange(len(row) + 1)
        row[pos:pos] = rng.choice([b'"', b",", b"\xff", b"\xc3", b" ", b"e9", b"-", b"\x00", b"''"])
    return bytes(row)


def edit(rows: list[bytes], rng: random.Random) -> tuple[str, list[bytes]]:
    """One single-row edit: append, remove, or replace a row by hostile content."""
    op = rng.choice(["append", "remove", "replace"])
    out = list(rows)
    i = rng.randrange(len(out))
    if op == "append":
        out.insert(rng.randrange(len(out) + 1), random_record(rng))
    elif op == "remove":
        del out[i]
    else:
        out[i] = random_record(rng)
    return op, out


def csv_bytes(rows: list[bytes], newline: bytes = b"\n", final: bool = True) -> bytes:
    return newline.join([HEADER] + rows) + (newline if final else b"")
