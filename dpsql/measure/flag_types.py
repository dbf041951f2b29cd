"""Per-person flag conditions that an engine could evaluate only by converting row values
(issue 32; docs/privacy.md §2a): such a conversion fails on some rows and not on others, so
whether the measurement fails would depend on the data.  Checked here from the columns'
source types (catalog or file metadata) and the condition's constants alone, before any row
is read.  Split out of ``measure.counting``, whose backend calls it before each count of a
person's view."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import date

from dpsql.errors import ProgrammingError
from dpsql.measure import reader
from dpsql.sql.syntax import data_type, exp

__all__ = ["flag_type_problem"]


#: The source type families a column may have for each way a flag's condition compares it
#: (``sql.people.flag_uses``) without the engine converting the column's values; a string
#: literal ("text") and NULL are converted to the column's type instead (DuckDB does it at
#: each row the condition reaches, so its constants are converted here first:
#: ``_conversion_failure``).
_FLAG_FAMILIES = {"number": ("integer", "float", "decimal"), "temporal": ("date", "timestamp", "timestamptz"),
                  "boolean": ("boolean",), "pattern": ("text",)}


def flag_type_problem(table: str, cond: exp.Expr, types: Mapping[str, str], dialect: str,
                      evaluate: Callable[[str, str | None], str | None] | None = None) -> tuple[str, str] | None:
    """(message, hint) when a per-person flag's condition on ``table``'s view could only be
    evaluated by converting a column's values (``o.status = 5`` on a text column: DuckDB
    converts every status to a number and fails on the first that is not one), from the
    columns' source types (``types``: view column → the engine's type name; catalog or file
    metadata).  Such a failure would depend on the data, so the condition is refused before
    any row is read, whatever the rows hold; None when every comparison is safe.  On DuckDB
    ``evaluate`` (``backend.constant_error``) converts the condition's constants alone."""
    from dpsql.sql.people import flag_uses
    for column, use in flag_uses(cond):
        allowed = _FLAG_FAMILIES.get(use)
        if allowed is None or column not in types:
            continue
        if reader.type_family(types[column], dialect) not in allowed:
            what = {"number": "a number", "temporal": "a date or time", "boolean": "a truth value",
                    "pattern": "a LIKE pattern"}[use]
            return (f"the condition '{cond.sql(dialect='postgres')}' on the persons' rows of {table!r} compares "
                    f"'{column}' (a {types[column]} column in the source) with {what}",
                    "the engine would convert every value of the column, which can fail on some values: compare "
                    "it with a constant of its own type ('text' for text columns, numbers for numeric ones), as "
                    "its declared domain lists them")
    if dialect == "duckdb":
        if evaluate is None:
            raise ProgrammingError("a DuckDB flag's constants are checked with backend.constant_error",
                                   hint="pass evaluate=")
        from dpsql.sql.people import flag_constants
        for column, use, const in flag_constants(cond):
            failure = _conversion_failure(const, use, types.get(column), dialect, evaluate)
            if failure is not None:
                return (f"the condition '{cond.sql(dialect='postgres')}' on the persons' rows of {table!r} compares "
                        f"'{column}' with {const.sql(dialect='postgres')}, which the engine cannot convert "
                        f"({failure})",
                        "the engine converts such a constant at each row it compares, so the measurement would "
                        "fail or not with the rows' values: write a constant its column's type holds")
    problem = _temporal_problem(table, cond, types, dialect)
    if problem is not None:
        return problem
    if dialect == "postgres":
        return None     # numeric is arbitrary precision there: a column widens to it exactly
    from dpsql.sql.people import flag_numbers
    for column, const in flag_numbers(cond):
        if column not in types or reader.type_family(types[column], dialect) not in ("integer", "decimal"):
            continue
        shape = _number_shape(const)
        if shape is None:
            continue     # a float: the column is compared as a float, which never fails
        digits, scale = _column_shape(types[column], dialect)
        if reader.type_family(types[column], dialect) == "integer":
            # an integer constant is cast to the column's type; a decimal one widens the column
            need = digits + shape[1] if shape[1] else 0
        else:
            need = max(digits, shape[0]) + max(scale, shape[1])
        if need > _MAX_DECIMAL:
            return (f"the condition '{cond.sql(dialect='postgres')}' on the persons' rows of {table!r} compares "
                    f"'{column}' (a {types[column]} column in the source) with {const.sql(dialect='postgres')}, "
                    f"which needs a decimal of {need} digits to hold both",
                    f"the engine would convert each row's value (or the constant) to a decimal of at most "
                    f"{_MAX_DECIMAL} digits, which fails on some rows' values: compare it with a constant of at "
                    f"most {max(_MAX_DECIMAL - digits, 0)} decimal places and {_MAX_DECIMAL - scale} digits, "
                    "or with a float (1.5e0)")
    return None


def _conversion_failure(const: exp.Expr, use: str, sql_type: str | None, dialect: str,
                        evaluate: Callable[[str, str | None], str | None]) -> str | None:
    """DuckDB's error converting a flag's constant (itself, and a string literal to the type of
    the column it is compared with), or None.  DuckDB converts a condition's constants lazily,
    at each row the condition reaches (``s = 'X' AND priority = 'abc'`` fails only when some
    row has s = 'X'), so a constant it cannot convert would make the measurement fail with the
    data; evaluated on the constant alone, in an empty database (``evaluate``,
    ``backend.constant_error``): public."""
    if use == "null":
        return None
    text = const.sql(dialect=dialect)
    cast = use == "text" and sql_type is not None and reader.type_family(sql_type, dialect) != "text"
    return evaluate(text, sql_type if cast else None)


#: sqlglot's names of one date or time type in the engines' dialects (TIMESTAMP_S, _MS and
#: _NS are types of their own: a TIMESTAMP's range does not fit in TIMESTAMP_NS)
_TIME_KIND = {"DATE32": "DATE", "TIMESTAMPNTZ": "TIMESTAMP", "DATETIME": "TIMESTAMP", "TIMESTAMPLTZ": "TIMESTAMPTZ"}


def _temporal_problem(table: str, cond: exp.Expr, types: Mapping[str, str], dialect: str) -> tuple[str, str] | None:
    """(message, hint) when a flag compares a date or time column with a typed constant of
    another type (not a string literal, which the engine converts to the column's type): the
    engine would convert the column's values, which fails on some (DuckDB: a date of year
    5,000,000 compared with a TIMESTAMPTZ, a timestamp with a TIMESTAMP_NS; PostgreSQL: a date
    beyond a timestamp's range), or a DATE constant outside the years 1 to 9999, converted at
    each row it meets (PostgreSQL's cross-type operators).  None when there is none."""
    from dpsql.sql.people import flag_constants
    for column, use, const in flag_constants(cond):
        if use != "temporal" or column not in types:
            continue
        node = const
        while isinstance(node, exp.Paren):
            node = node.this
        column_type = data_type(types[column], dialect)
        to = node.args.get("to") if isinstance(node, exp.Cast) else None
        if to is None or column_type is None:
            continue
        if _TIME_KIND.get(to.this.name, to.this.name) == _TIME_KIND.get(column_type.this.name, column_type.this.name):
            continue     # the same type: only the constant is converted (checked when it is bound)
        inner = node.this
        if to.is_type(exp.DataType.Type.DATE) and isinstance(inner, exp.Literal) and inner.is_string:
            try:
                if len(inner.name) == 10 and date.fromisoformat(inner.name):
                    continue     # a date of years 1-9999 converts to every engine's timestamps
            except ValueError:
                pass
        return (f"the condition '{cond.sql(dialect='postgres')}' on the persons' rows of {table!r} compares "
                f"'{column}' (a {types[column]} column in the source) with {const.sql(dialect='postgres')}, "
                "a constant of another type",
                "the engine would convert the column's values (or the constant, at each row), which can fail on "
                "some: write the constant as a string ('2020-01-31'), which is converted to the column's type, or "
                "as a DATE between the years 1 and 9999")
    return None


#: The widest DECIMAL DuckDB and Spark have.  Comparing a decimal (or integer) column with a
#: decimal constant converts both to DECIMAL(i + s, s), i and s the larger integer digits and
#: decimal places of the two, capped at 38 digits in all: beyond, the conversion of a row's
#: value fails when it has more than 38 − s integer digits (DuckDB: 'Could not cast value
#: 2000000000 to DECIMAL(38,29)'), and a constant's conversion fails at the first row read.
_MAX_DECIMAL = 38
#: integer digits of each integer type (sqlglot's names); any other integer type: 39
_INTEGER_DIGITS = {"TINYINT": 3, "UTINYINT": 3, "SMALLINT": 5, "USMALLINT": 5, "MEDIUMINT": 8, "UMEDIUMINT": 8,
                   "INT": 10, "UINT": 10, "BIGINT": 19, "UBIGINT": 20}


def _column_shape(sql_type: str, dialect: str) -> tuple[int, int]:
    """(integer digits, decimal places) of an integer or decimal column type, from its name;
    a DECIMAL without its precision or a type not known here: 39 integer digits, more than
    any decimal holds, so that no decimal constant passes."""
    dtype = data_type(sql_type, dialect)
    if dtype is None:
        return _MAX_DECIMAL + 1, 0
    if reader.type_family(sql_type, dialect) == "integer":
        return _INTEGER_DIGITS.get(dtype.this.name, _MAX_DECIMAL + 1), 0
    try:
        precision, *scale = (int(p.this.name) for p in dtype.expressions)
    except (ValueError, AttributeError):
        return _MAX_DECIMAL + 1, 0
    places = scale[0] if scale else 0
    return max(precision - places, 0), places


def _number_shape(const: exp.Expr) -> tuple[int, int] | None:
    """(integer digits, decimal places) of a number constant as the engine types it (``1.50``:
    (1, 2); ``CAST(x AS DECIMAL(10, 4))``: (6, 4)), or None when it is a float (an exponent
    or a cast to a float type); a cast whose shape is not known here: (38, 38)."""
    while isinstance(const, (exp.Paren, exp.Neg)):
        const = const.this
    if isinstance(const, exp.Literal):
        text = const.name
        if "e" in text.lower():
            return None
        whole, _, frac = text.partition(".")
        return len(whole.lstrip("+-0")), len(frac)
    if isinstance(const, exp.Cast):
        to = const.args["to"]
        if to.is_type(*exp.DataType.REAL_TYPES) and not to.is_type(exp.DataType.Type.DECIMAL):
            return None
        if to.is_type(*exp.DataType.INTEGER_TYPES):
            return _INTEGER_DIGITS.get(to.this.name, _MAX_DECIMAL + 1), 0
        if to.is_type(exp.DataType.Type.DECIMAL) and len(to.expressions) == 2:
            try:
                precision, places = (int(p.this.name) for p in to.expressions)
                return max(precision - places, 0), places
            except (ValueError, AttributeError):
                pass
    return _MAX_DECIMAL, _MAX_DECIMAL


