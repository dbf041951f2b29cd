"""How a categorical column's declared labels are shown to people.

A short list is shown whole; a long one is summarised: how many labels there are, the
first few, and where to see them all.  An open column's (other) cell is explained: every
value that is not a label is counted there, together, and no query can count one apart.
One wording for the shell's ``\\d``, the SQL refusals and catalog text (issue 33 item 7:
a 1,459-label column filled a 194-line pager, and a refusal listed the first 50 of 1,458
labels with no "…" and no word that the value asked for is counted in (other)).

Labels are public metadata (the declared domain); nothing here looks at data.
"""

from __future__ import annotations

import difflib
import os
from typing import Any

from dpsql.domain import OTHER_LABEL

#: More declared labels than this are summarised in the shell's ``\d``.
DESCRIBE_LIMIT = 50
#: ... and in a refusal's hint, where a few lines are all a reader takes in.
REFUSAL_LIMIT = 20
#: How many labels a summary shows before "… and N more".
SHOWN = 8


def declared_labels(attr) -> list[Any]:
    """The labels a query can name: the declared ones, without the (other) and NULL cells."""
    skip = {attr.null_index, attr.other_index}
    return [lab for i, lab in enumerate(attr.labels())
            if i not in skip and lab is not None and lab != OTHER_LABEL]


def catalog_type(attr) -> str:
    """A column's SQL type as analysts and their tools see it (the shell's ``\\d``, the wire
    server's catalog), in PostgreSQL's words: what the column can be aggregated as.

    Integer columns are ``bigint`` however they are binned, numeric columns ``double
    precision``, categoricals whose labels are all integers ``bigint``, other categoricals
    ``text``.  The type follows the declared kind, not the bin width, so BI tools offer
    AVG/SUM on every column the engine averages (issue 33 item 2: ``fnlwgt`` in bins of
    50,000 was ``text`` and Superset offered only COUNT).  A bare ``GROUP BY`` of a column
    in wide bins returns the bin's label (``'[1, 50000]'``), which is ``text`` in that
    result's own row description (``dpsql.sql.grouping.column_key_values``): the value
    inside a bin is not known.  Public metadata only."""
    if attr.kind == "categorical":
        labels = declared_labels(attr)
        return "bigint" if labels and all(isinstance(x, int) and not isinstance(x, bool) for x in labels) \
            else "text"
    if attr.kind == "integer":
        return "bigint"
    if attr.kind == "date":
        return "date"
    if attr.kind == "timestamp":
        return "timestamp without time zone"     # wall-clock time in the declared zone
    if attr.kind == "time":
        return "time without time zone"
    return "double precision"


def _num(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def domain_items(attr, limit: int | None = DESCRIBE_LIMIT, see_all: str = "") -> list[str]:
    """The declared domain of one column as display items (the shell's ``\\d``, the wire
    catalog's column comments); a categorical with more than ``limit`` labels is summarised,
    ``see_all`` saying where to see every label.  Public metadata only."""
    kind = attr.kind
    if kind == "categorical":
        labels = [str(lab) for lab in declared_labels(attr)]
        shown = labels if limit is None or len(labels) <= limit else labels[:SHOWN]
        items = [repr(lab) for lab in shown]
        if len(shown) < len(labels):
            where = f"; {see_all}" if see_all else ""
            items.append(f"… and {len(labels) - len(shown):,} more ({len(labels):,} labels{where})")
        if attr.other_index is not None:
            items.append("(any other value)")
    elif kind == "integer":
        edges = attr.edges
        w = attr.bin_width
        if edges:
            items = [f"{attr.lo}..{attr.hi} in bins starting at {edges[0]}"] + [str(e) for e in edges[1:]]
        else:
            items = [f"{attr.lo}..{attr.hi}" + (f" in bins of {w}" if w != 1 else "")]
    elif kind == "numeric":
        items = [f"bins with edges {_num(attr.edges[0])}"] + [_num(e) for e in attr.edges[1:]]
    elif kind in ("date", "timestamp", "time"):
        zone = f" ({attr.timezone})" if kind == "timestamp" else ""
        items = [f"{attr.lo} .. {attr.hi}{zone} by {attr.bin}"]
    else:
        items = [str(x) for x in attr.labels()]
    if attr.nullable:
        items.append("NULL")
    return items


def column_comment(attr, see_all: str = "") -> str:
    """A column's declared domain in one paragraph, for ``COMMENT ON COLUMN`` (psql's ``\\d+``,
    BI tools' column descriptions): kind, bounds, bins, labels (summarised when long), what
    GROUP BY returns for wide bins and what an open column's (other) cell holds."""
    text = f"declared domain ({attr.kind}, {attr.size:,} cells): " + ", ".join(domain_items(attr, see_all=see_all))
    if attr.kind != "categorical":
        bounds = attr.bin_bounds()
        wide = next((i for i, b in enumerate(bounds) if b is not None and b[0] != b[1]), None)
        if wide is not None:
            example = attr.labels()[wide]
            text += (f". GROUP BY {attr.name} returns each bin's label (e.g. '{example}'): the value "
                     "inside a bin is not known")
    elif is_open(attr):
        text += ". " + other_cell(attr)
    return text


def is_open(attr) -> bool:
    """Whether the column has an (other) cell for values that are not labels."""
    return getattr(attr, "kind", None) == "categorical" and attr.other_index is not None


def label_items(attr, limit: int, shown: int = SHOWN) -> tuple[list[str], int]:
    """The labels to display (quoted) and how many more there are: all of them when there
    are at most ``limit``, else the first ``shown``."""
    labels = declared_labels(attr)
    if len(labels) <= limit:
        return [repr(lab) for lab in labels], 0
    return [repr(lab) for lab in labels[:shown]], len(labels) - shown


def summary(attr, limit: int, shown: int = SHOWN) -> str:
    """``'A', 'B'`` when short; ``1,458 labels: 'A', 'B', … and 1,450 more`` when long."""
    items, more = label_items(attr, limit, shown)
    if not more:
        return ", ".join(items)
    return f"{len(items) + more:,} labels: " + ", ".join(items) + f", … and {more:,} more"


def how_to_list(table: str | None, column: str) -> str:
    """Where a user sees every label of a column: the operator's shell lists one column in
    full; an analyst behind ``dpsql serve`` reads the catalog's ``dpsql_columns`` view (the
    compiler does not know who asks, so both are named)."""
    return f"every label: \\d {table or 'TABLE'} {column} in dpsql shell; over dpsql serve, dpsql_columns.labels"


def other_cell(attr, value: Any = None) -> str:
    """What an open column does with a value that is not a label, in one sentence."""
    which = ("every value that is not one of its labels" if value is None
             else f"{value!r}, like every value that is not one of its labels,")
    return (f"'{attr.name}' is open: {which} is counted in its one {OTHER_LABEL} cell, which no "
            f"query can split (GROUP BY shows that cell as '{OTHER_LABEL}')")


def close_labels(attr, value: Any, n: int = 3) -> list[str]:
    """Declared labels spelled like ``value`` (a typo's likely intent), quoted: the most
    similar first (``difflib``'s ratio, ignoring case), then the longest common prefix."""
    text = str(value).casefold()
    matcher = difflib.SequenceMatcher()
    matcher.set_seq2(text)
    scored = []
    for lab in declared_labels(attr):
        folded = str(lab).casefold()
        matcher.set_seq1(folded)
        # the cheap upper bounds first, as difflib.get_close_matches does
        if matcher.real_quick_ratio() >= 0.6 and matcher.quick_ratio() >= 0.6:
            ratio = matcher.ratio()
            if ratio >= 0.6:
                prefix = len(os.path.commonprefix([folded, text]))
                scored.append((-ratio, -prefix, str(lab), lab))
    return [repr(lab) for *_, lab in sorted(scored)[:n]]
