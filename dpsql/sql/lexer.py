"""A linear-time SQL lexer and the checks that run on its tokens before sqlglot parses.

sqlglot's parser recurses per nesting level, its tokenizer walks the text character by
character (about 1.3 s per MB here), and it accepts a few shapes PostgreSQL refuses.  So
every statement goes through this lexer first (one pass; strings, comments and quoted
identifiers are skipped with ``str.find``, other tokens with single-quantifier regexes; no
regex with nested quantifiers ever sees user text), which:

* finds a leading ``EXPLAIN [ANALYZE] [VERBOSE] | EXPLAIN (options)`` (after any comments);
* reports unterminated strings, quoted identifiers, comments and dollar quotes, and
  zero-length quoted identifiers, with their positions (sqlglot gave none);
* refuses what PostgreSQL refuses and sqlglot lets through: ``,,``, a comma before FROM or
  ``)``, ``IN ()``, an empty ``GROUP BY``/``ORDER BY``;
* bounds the work: nesting deeper than :data:`MAX_NESTING` (parentheses, CASE, runs of
  prefix operators) or more than :data:`MAX_TOKENS` tokens is refused with 54001
  before sqlglot sees it, so nothing recurses out of the stack or runs for long;
* numbers the ``?`` (and ``%s``) markers: the k-th in the text becomes ``$k``, so binding
  follows the text order and each parameter error can point at its marker;
* replaces long IN lists of literals by one placeholder, so a 100,000-item list costs one
  pass here instead of 100,000 sqlglot nodes (the values come back after parsing).

Positions: :meth:`Prepared.orig` maps an offset in the text handed to sqlglot back to
the user's SQL.
"""

from __future__ import annotations

import bisect
import re
import secrets
from dataclasses import dataclass, field

from dpsql.errors import ProgrammingError, StatementTooComplexError, SyntaxError

__all__ = ["Prepared", "prepare", "tokenize", "MAX_NESTING", "MAX_TOKENS",
           "IN_LIST_MIN"]

#: Deepest nesting of parentheses, CASE … END and prefix operators that is parsed.  sqlglot
#: spends ~20 stack frames per parenthesis level (46 levels exhaust Python's default
#: limit from an empty stack); 32 leaves room for the caller's stack and the compiler's
#: own recursion, and no BI tool we studied nests deeper than ~10.
MAX_NESTING = 32
#: Most tokens (after IN-list compaction) a statement may have: ~0.4 s of sqlglot parsing.
MAX_TOKENS = 20_000
#: IN lists of at least this many literals are compacted before parsing.
IN_LIST_MIN = 64
#: Statements longer than this reach sqlglot without their comments.
_LONG = 1 << 16


# Token kinds.
WORD, NUM, STR, QID, PARAM, OP, PUNCT = "word", "num", "str", "qid", "param", "op", "punct"

_WS = re.compile(r"\s+")
_WORD = re.compile(r"[^\W\d][\w$]*")
_DIGITS = re.compile(r"\d+")
_EXP = re.compile(r"[eE][+-]?\d+")
_OPRUN = re.compile(r"[+\-*/<>=~!@#%^&|`]+")
_TAG = re.compile(r"\$(?:[^\W\d]\w*)?\$")
_NAMED = re.compile(r"%\(\w+\)s")
_COLON_NAME = re.compile(r":[^\W\d]\w*")
_BLOCK = re.compile(r"/\*|\*/")
_ESC = re.compile(r"['\\]")


class Token:
    """One significant token: kind, [start, end) in the SQL, and its text."""

    __slots__ = ("kind", "start", "end", "text")

    def __init__(self, kind: str, start: int, end: int, text: str) -> None:
        self.kind = kind
        self.start = start
        self.end = end
        self.text = text

    @property
    def upper(self) -> str:
        return self.text.upper() if self.kind == WORD else ""

    def __repr__(self) -> str:
        return f"Token({self.kind}, {self.start}, {self.text!r})"


def _near(sql: str, start: int, width: int = 24) -> str:
    text = sql[start:start + width]
    return text + ("…" if start + width < len(sql) else "")


def _unterminated(what: str, sql: str, start: int) -> SyntaxError:
    return SyntaxError(f"unterminated {what} at or near \"{_near(sql, start)}\"", position=start + 1,
                       hint="close it, or check the quotes near the reported position")


# The common tokens in one alternation (each branch a single run, so matching is linear);
# everything that needs a closing delimiter is scanned by hand below.
_SIMPLE = re.compile(r"(?P<ws>\s+)|(?P<word>[^\W\d][\w$]*)|(?P<num>\d+)|(?P<punct>[(),;\[\]{}])")


def tokenize(sql: str, comments: list | None = None) -> list[Token]:
    """Significant tokens of ``sql`` (whitespace and comments dropped), in one pass; the
    (start, end) of each comment is appended to ``comments`` when given.  A statement that
    is certain to exceed :data:`MAX_TOKENS` is refused as soon as that is known."""
    out: list[Token] = []
    append = out.append
    simple = _SIMPLE.match
    n = len(sql)
    i = 0
    check = 1 << 15
    while i < n:
        if len(out) >= check:
            check *= 2          # doubling keeps the checks linear in total
            if _fewest_tokens(out) > MAX_TOKENS:
                raise StatementTooComplexError(
                    f"statement too complex: more than {MAX_TOKENS:,} tokens", position=out[-1].start + 1,
                    hint="split the query, or list many values with one IN (…) of literals")
        m = simple(sql, i)
        if m is not None:
            kind = m.lastgroup
            j = m.end()
            if kind == "ws":
                i = j
                continue
            if kind == "punct":
                append(Token(PUNCT, i, j, m.group()))
                i = j
                continue
            if kind == "num":
                if j < n and sql[j] in ".eE":
                    j = _number(sql, i)
                append(Token(NUM, i, j, sql[i:j]))
                i = j
                continue
            word = m.group()
            if j < n and sql[j] in "'&" and len(word) == 1:
                k = _prefixed_string(sql, i, j, word.upper())
                if k:
                    append(k)
                    i = k.end
                    continue
            append(Token(WORD, i, j, word))
            i = j
            continue
        c = sql[i]
        if c == "-" and sql.startswith("--", i):
            j = sql.find("\n", i)
            j = n if j < 0 else j + 1
            if comments is not None:
                comments.append((i, j))
            i = j
            continue
        if c == "/" and sql.startswith("/*", i):
            j = _block_comment(sql, i)
            if comments is not None:
                comments.append((i, j))
            i = j
            continue
        if c == "'":
            j = _quoted(sql, i, "'")
            if j < 0:
                raise _unterminated("quoted string", sql, i)
            append(Token(STR, i, j, sql[i:j]))
            i = j
            continue
        if c == '"':
            j = _quoted(sql, i, '"')
            if j < 0:
                raise _unterminated("quoted identifier", sql, i)
            if j == i + 2:
                raise SyntaxError(f"zero-length delimited identifier at or near \"{_near(sql, i)}\"",
                                  position=i + 1, hint="give the name at least one character")
            append(Token(QID, i, j, sql[i:j]))
            i = j
            continue
        if c == "." and i + 1 < n and sql[i + 1].isdigit():
            j = _number(sql, i)
            append(Token(NUM, i, j, sql[i:j]))
            i = j
            continue
        if c == "$":
            m = _DIGITS.match(sql, i + 1)
            if m:
                append(Token(PARAM, i, m.end(), sql[i:m.end()]))
                i = m.end()
                continue
            m = _TAG.match(sql, i)
            if m:
                tag = m.group()
                end = sql.find(tag, m.end())
                if end < 0:
                    raise _unterminated("dollar-quoted string", sql, i)
                append(Token(STR, i, end + len(tag), sql[i:end + len(tag)]))
                i = end + len(tag)
                continue
        if c == "?":
            append(Token(PARAM, i, i + 1, "?"))
            i += 1
            continue
        if c == "%":
            if sql.startswith("%s", i):
                append(Token(PARAM, i, i + 2, "%s"))
                i += 2
                continue
            m = _NAMED.match(sql, i)
            if m:
                append(Token(PARAM, i, m.end(), m.group()))
                i = m.end()
                continue
        if c == ":":
            if sql.startswith("::", i):
                append(Token(OP, i, i + 2, "::"))
                i += 2
                continue
            m = _COLON_NAME.match(sql, i)
            if m and (not out or out[-1].end != i or out[-1].kind in (OP, PUNCT)):
                append(Token(PARAM, i, m.end(), m.group()))
                i = m.end()
                continue
            append(Token(OP, i, i + 1, ":"))
            i += 1
            continue
        if c == ".":
            append(Token(PUNCT, i, i + 1, c))
            i += 1
            continue
        m = _OPRUN.match(sql, i)
        if m:
            j = m.end()
            # An operator never swallows the start of a comment.
            for mark in ("--", "/*"):
                at = sql.find(mark, i, j)
                if at > i:
                    j = at
            append(Token(OP, i, j, sql[i:j]))
            i = j
            continue
        append(Token(OP, i, i + 1, c))
        i += 1
    return out


def _fewest_tokens(toks: list[Token]) -> int:
    """A lower bound on the token count after IN-list compaction (every run of literals
    after ``IN (`` counts as nothing)."""
    count, k, n = 0, 0, len(toks)
    while k < n:
        t = toks[k]
        count += 1
        if t.kind == WORD and k + 1 < n and toks[k + 1].text == "(" and t.text.upper() == "IN":
            k += 2
            while k < n and (toks[k].kind in (NUM, STR) or toks[k].text in (",", "-")):
                k += 1
            continue
        k += 1
    return count


def _prefixed_string(sql: str, i: int, j: int, prefix: str) -> Token | None:
    """E'…', X'…', B'…', N'…', U&'…' and U&"…" starting at ``i`` (prefix letter), or None."""
    n = len(sql)
    if sql[j] == "'" and prefix in ("E", "X", "B", "N"):
        k = _escaped(sql, j) if prefix == "E" else _quoted(sql, j, "'")
        if k < 0:
            raise _unterminated("quoted string", sql, i)
        return Token(STR, i, k, sql[i:k])
    if prefix == "U" and sql[j] == "&" and j + 1 < n and sql[j + 1] in "'\"":
        q = sql[j + 1]
        k = _quoted(sql, j + 1, q)
        if k < 0:
            raise _unterminated("quoted string" if q == "'" else "quoted identifier", sql, i)
        return Token(STR if q == "'" else QID, i, k, sql[i:k])
    return None


def _quoted(sql: str, i: int, q: str) -> int:
    """End (exclusive) of the quoted run starting at ``sql[i] == q``; a doubled quote is
    part of it.  -1 when unterminated."""
    j = i + 1
    while True:
        k = sql.find(q, j)
        if k < 0:
            return -1
        if sql.startswith(q, k + 1):
            j = k + 2
            continue
        return k + 1


def _escaped(sql: str, i: int) -> int:
    """End of an E'…' string (backslash escapes and doubled quotes); -1 when unterminated."""
    j = i + 1
    while True:
        m = _ESC.search(sql, j)
        if m is None:
            return -1
        k = m.start()
        if sql[k] == "\\":
            j = k + 2
            continue
        if sql.startswith("'", k + 1):
            j = k + 2
            continue
        return k + 1


def _block_comment(sql: str, i: int) -> int:
    """End of a (nested, as in PostgreSQL) /* … */ comment."""
    depth, j = 0, i
    while True:
        m = _BLOCK.search(sql, j)
        if m is None:
            raise _unterminated("/* comment", sql, i)
        depth += 1 if m.group() == "/*" else -1
        j = m.end()
        if depth == 0:
            return j


def _number(sql: str, i: int) -> int:
    j = i
    m = _DIGITS.match(sql, j)
    if m:
        j = m.end()
    if j < len(sql) and sql[j] == "." and not sql.startswith("..", j):
        j += 1
        m = _DIGITS.match(sql, j)
        if m:
            j = m.end()
    m = _EXP.match(sql, j)
    return m.end() if m else j


# --- checks and rewriting -----------------------------------------------------------------

_CLAUSE = {"FROM", "WHERE", "GROUP", "HAVING", "ORDER", "LIMIT", "OFFSET", "FETCH", "UNION", "INTERSECT",
           "EXCEPT", "WINDOW", "QUALIFY", "INTO", "FOR"}
_PREFIX = {"NOT", "-", "+", "~"}


def _syntax_at(sql: str, tok: Token | None, n: int) -> SyntaxError:
    if tok is None:
        return SyntaxError("syntax error at end of input", position=n + 1 if n else 1,
                           hint="the statement ends too early; complete it")
    return SyntaxError(f"syntax error at or near \"{tok.text[:40]}\"", position=tok.start + 1,
                       hint="check the SQL near the reported position")


def _check(sql: str, toks: list[Token], dialect: str) -> None:
    """The token-level refusals listed in the module docstring."""
    n = len(sql)
    depth, run, cases = 0, 0, 0
    for k, tok in enumerate(toks):
        nxt = toks[k + 1] if k + 1 < len(toks) else None
        text = tok.text
        if tok.kind == PUNCT:
            if text in "([":
                depth += 1
            elif text in ")]":
                depth = max(0, depth - 1)
            elif text == "," and (nxt is None or nxt.text in (",", ")", ";")
                                  or (nxt.upper in _CLAUSE and dialect == "postgres")):
                raise _syntax_at(sql, nxt, n)
        word = tok.upper
        if word == "CASE":
            cases += 1
        elif word == "END" and cases:
            cases -= 1
        if word in _PREFIX or (tok.kind == OP and text in _PREFIX):
            run += 1
        else:
            run = 0
        if depth + cases + run > MAX_NESTING:
            raise StatementTooComplexError(
                f"statement too complex: nested more than {MAX_NESTING} levels deep",
                position=tok.start + 1, hint="simplify the expression, e.g. use IN (…) instead of nested OR")
        if word == "IN" and nxt is not None and nxt.text == "(" and k + 2 < len(toks) and toks[k + 2].text == ")":
            raise _syntax_at(sql, toks[k + 2], n)
        if word in ("GROUP", "ORDER") and nxt is not None and nxt.upper == "BY":
            after = toks[k + 2] if k + 2 < len(toks) else None
            if after is None or after.text in (")", ";", ",") or after.upper in _CLAUSE - {"FOR"}:
                raise _syntax_at(sql, after, n)
    if len(toks) > MAX_TOKENS:
        raise StatementTooComplexError(
            f"statement too complex: {len(toks):,} tokens (limit {MAX_TOKENS:,})",
            position=toks[MAX_TOKENS].start + 1,
            hint="split the query, or list many values with one IN (…) of literals")


@dataclass
class Prepared:
    """The statement as sqlglot will see it, and how to map back to the user's SQL."""

    sql: str                                   # the user's SQL
    text: str                                  # what sqlglot parses (the query part, rewritten)
    start: int                                 # offset of the query part in ``sql`` (after EXPLAIN)
    explain: bool
    markers: list[Token] = field(default_factory=list)   # parameter markers, in text order
    style: str | None = None                   # "qmark" | "numbered" | "named" | None
    inlists: dict[str, list[Token]] = field(default_factory=dict)
    # (offset in text, offset in sql, verbatim?) per piece, sorted by text offset
    _pieces: list[tuple[int, int, bool]] = field(default_factory=list)
    _keys: list[int] = field(default_factory=list)

    def orig(self, pos: int) -> int:
        """0-based offset in ``sql`` of 0-based offset ``pos`` in ``text``."""
        k = bisect.bisect_right(self._keys, pos) - 1
        if k < 0:
            return self.start
        t0, s0, verbatim = self._pieces[k]
        return s0 + (pos - t0) if verbatim else s0


def _explain_prefix(toks: list[Token]) -> int:
    """Index of the first token of the explained query, or 0 without EXPLAIN."""
    if not toks or toks[0].upper != "EXPLAIN":
        return 0
    k = 1
    if k < len(toks) and toks[k].text == "(":
        depth = 0
        while k < len(toks):
            depth += {"(": 1, ")": -1}.get(toks[k].text, 0)
            k += 1
            if depth == 0:
                break
    while k < len(toks) and toks[k].upper in ("ANALYZE", "ANALYSE", "VERBOSE"):
        k += 1
    return k


def _literal_item(toks: list[Token], k: int) -> int:
    """Tokens in the simple literal starting at ``toks[k]`` (a number, -number or a plain
    string), 0 if it is anything else."""
    t = toks[k]
    if t.kind == NUM:
        return 1
    if t.kind == STR and t.text.startswith("'"):
        return 1
    if t.kind == OP and t.text == "-" and k + 1 < len(toks) and toks[k + 1].kind == NUM \
            and toks[k + 1].start == t.end:
        return 2
    return 0


def _long_in_lists(toks: list[Token]) -> list[tuple[int, int, list[Token]]]:
    """(index of '(', index of ')', items) of each IN list of ≥ IN_LIST_MIN simple literals."""
    out = []
    k = 0
    while k < len(toks):
        if toks[k].upper == "IN" and k + 1 < len(toks) and toks[k + 1].text == "(":
            j = k + 2
            items: list[Token] = []
            while j < len(toks):
                w = _literal_item(toks, j)
                if not w:
                    break
                items.append(toks[j] if w == 1 else Token(NUM, toks[j].start, toks[j + 1].end,
                                                          "-" + toks[j + 1].text))
                j += w
                if j < len(toks) and toks[j].text == ",":
                    j += 1
                    continue
                break
            if j < len(toks) and toks[j].text == ")" and toks[j - 1].text != "," and len(items) >= IN_LIST_MIN:
                out.append((k + 1, j, items))
                k = j + 1
                continue
        k += 1
    return out


def prepare(sql: str, dialect: str = "postgres") -> Prepared:
    """Lex, check and rewrite one statement for sqlglot (see the module docstring)."""
    comments: list[tuple[int, int]] = []
    toks = tokenize(sql, comments)
    first = _explain_prefix(toks)
    explain = first > 0
    toks = toks[first:]
    start = toks[0].start if toks else len(sql)
    markers = [t for t in toks if t.kind == PARAM]
    styles = {"qmark" if t.text in ("?", "%s") else "numbered" if t.text.startswith("$") else "named"
              for t in markers}
    if len(styles) > 1:
        second = next(t for t in markers if ("qmark" if t.text in ("?", "%s") else "numbered"
                                             if t.text.startswith("$") else "named") != _style(markers[0]))
        raise ProgrammingError("the statement mixes parameter styles ('?', '$n', named)",
                               position=second.start + 1, hint="use one style of parameter marker")
    inlists = _long_in_lists(toks)
    # Tokens after compaction: each compacted list counts as one.
    _check(sql, _compacted(toks, inlists), dialect)
    edits: list[tuple[int, int, str]] = []   # (start, end, replacement) in sql offsets
    nonce = secrets.token_hex(4)
    named: dict[str, list[Token]] = {}
    for n, (lo, hi, items) in enumerate(inlists):
        name = f"__dpsql_in_{nonce}_{n}"
        named[name] = items
        edits.append((toks[lo].end, toks[hi].start, name))
    if len(sql) > _LONG:
        # sqlglot's tokenizer crawls through comments; a long statement loses them first.
        edits.extend((a, b, " ") for a, b in comments if a >= start)
    k = 0
    for t in markers:
        if t.text in ("?", "%s"):
            k += 1
            edits.append((t.start, t.end, f"${k}"))
    edits.sort()
    pieces: list[tuple[int, int, bool]] = []
    parts: list[str] = []
    pos_text, pos_sql = 0, start
    for a, b, rep in edits:
        if a > pos_sql:
            pieces.append((pos_text, pos_sql, True))
            parts.append(sql[pos_sql:a])
            pos_text += a - pos_sql
        pieces.append((pos_text, a, False))
        parts.append(rep)
        pos_text += len(rep)
        pos_sql = b
    pieces.append((pos_text, pos_sql, True))
    parts.append(sql[pos_sql:])
    style = _style(markers[0]) if markers else None
    return Prepared(sql=sql, text="".join(parts), start=start, explain=explain, markers=markers, style=style,
                    inlists=named, _pieces=pieces, _keys=[p[0] for p in pieces])


def _style(t: Token) -> str:
    return "qmark" if t.text in ("?", "%s") else "numbered" if t.text.startswith("$") else "named"


def _compacted(toks: list[Token], inlists) -> list[Token]:
    if not inlists:
        return toks
    out, k = [], 0
    for lo, hi, _ in inlists:
        out.extend(toks[k:lo + 1])
        out.append(Token(WORD, toks[lo].end, toks[hi].start, "__list__"))
        k = hi
    out.extend(toks[k:])
    return out
