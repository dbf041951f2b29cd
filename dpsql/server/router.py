"""Classify one SQL statement for the wire server, from its AST and tokens (``dpsql.sql.syntax``).

Routes:

* ``empty`` — only whitespace/comments (EmptyQueryResponse);
* ``session`` — SET/SHOW/RESET, transaction control, SAVEPOINT/RELEASE, DISCARD,
  DEALLOCATE: answered by the connection itself, never by data;
* ``local`` — a FROM-less SELECT of session functions (``pg_backend_pid()``, ``version()``,
  ``current_user``, …) whose answer must describe *this* server and user;
* ``catalog`` — relations only from ``pg_catalog``/``information_schema`` (or none at all):
  sent to the schema-only shadow PostgreSQL, which holds no rows.  Only statements that
  begin with SELECT, WITH, VALUES, TABLE or ``(`` may go there (an allow-list: the shadow
  also refuses writes, but SET, ALTER ROLE, DO … never reach it).  A statement reading the
  budget (``dpsql_budget`` or ``dpsql_budget()``) is one too, flagged ``budget``: the
  connection's own budget rows replace the relation (``budget_sql``) before it is sent;
* ``engine`` — reads a private table: compiled and answered by the DP engine;
* ``error`` — refused with a SQLSTATE (writes 25006, COPY/cursors 0A000, mixing private and
  catalog relations 0A000, unknown relations 42P01).

Data SQL is never routed by matching its text: tables come from the AST.  Session-control
statements are recognised by their leading *token* because sqlglot parses several of them
(``SAVEPOINT x``, ``DISCARD ALL``) as aliases; they never carry data.  A statement sqlglot
cannot parse goes to the engine when any identifier token names a private table (the engine
then reports the syntax error with its position), otherwise to the shadow, which cannot leak
because it holds no rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from dpsql.sql.syntax import TokenType, exp, parse_statement, tokens as statement_tokens

CATALOG_SCHEMAS = frozenset({"pg_catalog", "information_schema"})
#: The view of every column's declared domain that the catalog creates next to the private tables
#: (``shadow.schema_ddl``): public metadata, answered by the catalog like ``pg_catalog``.
COLUMNS_VIEW = "dpsql_columns"
CATALOG_VIEWS = frozenset({COLUMNS_VIEW})
#: This analyst's budget (issue 33): a view and a set-returning function of the same rows, which
#: only the connection knows; ``budget_sql`` puts them into the statement as a VALUES list.
BUDGET_VIEW = "dpsql_budget"
BUDGET_COLUMNS = (("budget", "text"), ("rho", "double precision"), ("epsilon", "double precision"),
                  ("delta", "double precision"))
SESSION_WORDS = frozenset({"SET", "SHOW", "RESET", "BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT",
                           "SAVEPOINT", "RELEASE", "DISCARD", "DEALLOCATE", "UNLISTEN"})
LOCAL_FUNCTIONS = frozenset({"pg_backend_pid", "version", "current_database", "current_schema",
                             "current_user", "session_user", "current_catalog", "user"})
_LOCAL_NODES = {exp.CurrentUser: "current_user", exp.SessionUser: "session_user",
                exp.CurrentSchema: "current_schema", exp.CurrentDatabase: "current_database",
                exp.CurrentCatalog: "current_catalog", exp.CurrentVersion: "version"}
_WRITE_NODES = (exp.Insert, exp.Update, exp.Delete, exp.Create, exp.Drop, exp.Alter, exp.Merge,
                exp.TruncateTable)
CATALOG_HEADS = frozenset({"SELECT", "WITH", "VALUES", "TABLE", "("})


@dataclass(frozen=True)
class Route:
    kind: str                       # empty | session | local | catalog | engine | error
    words: tuple[str, ...] = ()     # session: the statement's tokens (upper-cased keywords)
    tokens: tuple = ()              # session: raw sqlglot tokens
    items: tuple = ()               # local: (column name, function name or literal value)
    sqlstate: str = ""
    message: str = ""
    hint: str | None = None
    tag: str = "SELECT"
    tree: object = field(default=None, compare=False)
    budget: bool = False            # catalog: reads dpsql_budget (budget_sql rewrites it first)
    fingerprint: str = field(default="", compare=False)   # for the query log (querylog.fingerprint)


def _cte_names(tree: exp.Expr) -> set[str]:
    return {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}


def _budget_tables(tree: exp.Expr) -> list:
    """The ``dpsql_budget`` and ``dpsql_budget()`` relations of the statement (not a CTE of
    that name)."""
    ctes = _cte_names(tree)
    found = []
    for table in tree.find_all(exp.Table):
        if (table.db or "").lower() not in ("", "public"):
            continue
        if isinstance(table.this, exp.Anonymous):
            if table.this.name.lower() == BUDGET_VIEW and not table.this.expressions:
                found.append(table)
        elif isinstance(table.this, exp.Identifier) and table.name.lower() == BUDGET_VIEW \
                and (table.db or BUDGET_VIEW not in ctes):
            found.append(table)
    return found


def budget_sql(tree: exp.Expr, rows) -> str:
    """The statement with each ``dpsql_budget`` relation replaced by ``rows`` (budget, rho,
    epsilon, delta: the connection's own, public ledger amounts) as a typed VALUES list, for
    the shadow PostgreSQL to evaluate whatever the statement does with them."""
    tree = tree.copy()
    for table in _budget_tables(tree):
        alias = table.args.get("alias")
        name = alias.this if alias is not None and alias.this is not None else exp.to_identifier(BUDGET_VIEW)
        columns = list(alias.columns) if alias is not None and alias.columns else \
            [exp.to_identifier(c) for c, _ in BUDGET_COLUMNS]
        values = [exp.Tuple(expressions=[
            exp.cast(exp.null() if v is None else exp.Literal.string(v) if isinstance(v, str)
                     else exp.Literal.number(repr(float(v))), typ)
            for v, (_, typ) in zip(row, BUDGET_COLUMNS)]) for row in rows]
        table.replace(exp.Values(expressions=values, alias=exp.TableAlias(this=name, columns=columns)))
    return tree.sql("postgres")


def _relations(tree: exp.Expr, private: set[str]) -> tuple[set, set, set]:
    """(private tables, catalog relations, unknown relations) referenced by the statement."""
    ctes = _cte_names(tree)
    found_private: set[str] = set()
    unknown: set[str] = set()
    found_catalog = {BUDGET_VIEW} if _budget_tables(tree) else set()
    for table in tree.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier):
            continue  # table functions: generate_series(…), unnest(…)
        name = table.name.lower()
        schema = table.db.lower() if table.db else ""
        if schema in CATALOG_SCHEMAS or (not schema and (name.startswith("pg_") or name in ("_pg_expandarray",))):
            found_catalog.add(f"{schema + '.' if schema else ''}{name}")
        elif not schema and name in ctes:
            continue
        elif schema in ("", "public") and name in private:
            found_private.add(name)
        elif schema in ("", "public") and name in CATALOG_VIEWS | {BUDGET_VIEW}:
            found_catalog.add(name)
        else:
            unknown.add(f"{schema + '.' if schema else ''}{name}")
    return found_private, found_catalog, unknown


_SIGNALS = ("pg_cancel_backend", "pg_terminate_backend")


def _int_literal(node) -> int | None:
    if isinstance(node, exp.Literal):
        try:
            return int(node.this)
        except ValueError:
            return None
    if isinstance(node, exp.Cast):
        return _int_literal(node.this)
    return None


def _signal_item(tree: exp.Select):
    """``SELECT pg_cancel_backend(<pid>)``, or Superset's ``SELECT pg_terminate_backend(pid) FROM
    pg_stat_activity WHERE pid = '<pid>'``: must act on *our* sessions, not the shadow's backends."""
    if len(tree.expressions) != 1:
        return None
    node = tree.expressions[0]
    inner = node.this if isinstance(node, exp.Alias) else node
    if not (isinstance(inner, exp.Anonymous) and inner.name.lower() in _SIGNALS and len(inner.expressions) == 1):
        return None
    func, arg = inner.name.lower(), inner.expressions[0]
    source = tree.args.get("from_") or tree.args.get("from")
    if source is None and not tree.args.get("where"):
        pid = _int_literal(arg)
    elif (source is not None and isinstance(source.this, exp.Table) and source.this.name.lower() == "pg_stat_activity"
          and not tree.args.get("joins") and isinstance(arg, exp.Column) and arg.name.lower() == "pid"
          and tree.args.get("where") is not None and isinstance(tree.args["where"].this, exp.EQ)):
        eq = tree.args["where"].this
        left, right = (eq.this, eq.expression) if isinstance(eq.this, exp.Column) else (eq.expression, eq.this)
        pid = _int_literal(right) if isinstance(left, exp.Column) and left.name.lower() == "pid" else None
    else:
        return None
    if pid is None:
        return None
    return ((node.alias or func, f"{func}:{pid}"),)


def _local_items(tree: exp.Select):
    """The SELECT list as (name, source) pairs when every item is a session function or literal."""
    if tree.args.get("from_") or tree.args.get("from") or tree.args.get("where") or tree.args.get("joins"):
        return None
    items = []
    for node in tree.expressions:
        alias = node.alias if isinstance(node, exp.Alias) else None
        inner = node.this if isinstance(node, exp.Alias) else node
        if isinstance(inner, exp.Dot) and isinstance(inner.this, exp.Identifier) \
                and inner.this.name.lower() == "pg_catalog":
            inner = inner.expression
        func = None
        if type(inner) in _LOCAL_NODES:
            func = _LOCAL_NODES[type(inner)]
        elif isinstance(inner, exp.Anonymous) and inner.name.lower() in LOCAL_FUNCTIONS and not inner.expressions:
            func = inner.name.lower()
        elif isinstance(inner, exp.Column) and not inner.table and inner.name.lower() in LOCAL_FUNCTIONS:
            func = inner.name.lower()
        if func is None:
            return None
        items.append((alias or func, func))
    return tuple(items) if items else None


def route(sql: str, private_tables) -> Route:
    from dpsql.server.querylog import fingerprint
    # a fresh tokenizer per statement (syntax.tokens): parse threads route concurrently
    tokens = statement_tokens(sql)
    if tokens is not None:
        tokens = [t for t in tokens if t.token_type != TokenType.SEMICOLON]
    return replace(_route(sql, private_tables, tokens), fingerprint=fingerprint(tokens, sql))


def _not_catalog(head: str) -> Route:
    return Route("error", sqlstate="0A000", message=f"{head or 'this'} statement is not supported by dpsql",
                 hint="send SELECT statements")


def _route(sql: str, private_tables, tokens) -> Route:
    private = {t.lower() for t in private_tables}
    if tokens is not None and not tokens:
        return Route("empty")
    if tokens:
        head = tokens[0].text.upper()
        if head in SESSION_WORDS:
            words = tuple(t.text.upper() if t.token_type not in (TokenType.STRING, TokenType.IDENTIFIER)
                          else t.text for t in tokens)
            return Route("session", words=words, tokens=tuple(tokens))
        if head in ("DECLARE", "FETCH", "MOVE", "CLOSE", "COPY", "LISTEN", "NOTIFY", "LOCK", "CALL", "DO",
                    "PREPARE", "EXECUTE"):
            return Route("error", sqlstate="0A000", message=f"{head} is not supported by dpsql",
                         hint="send plain SELECT statements; results are returned in full")
        if head in ("VACUUM", "ANALYZE", "CHECKPOINT", "REINDEX", "CLUSTER", "GRANT", "REVOKE", "COMMENT",
                    "REFRESH", "SECURITY", "IMPORT", "TRUNCATE"):
            return Route("error", sqlstate="25006", message=f"cannot execute {head} in a read-only transaction")
    head = tokens[0].text.upper() if tokens else ""
    if tokens and head == "EXPLAIN" and len(tokens) > 1:
        inner = route(sql[tokens[0].end + 1:], private_tables)
        if inner.kind == "engine":
            return Route("engine", tag="EXPLAIN")
        return inner if inner.kind == "error" else Route("catalog", tag="EXPLAIN")
    tree = parse_statement(sql)
    if tree is None:
        names = {t.text.lower() for t in tokens or () if t.token_type in (TokenType.VAR, TokenType.IDENTIFIER)}
        if names & private:
            return Route("engine")
        if BUDGET_VIEW in names:   # the shadow's dpsql_budget is empty: never send it unrewritten
            return Route("error", sqlstate="42601", message=f"syntax error in a statement reading {BUDGET_VIEW}",
                         hint=f"e.g. SELECT * FROM {BUDGET_VIEW}()")
        if tokens is None:
            return Route("error", sqlstate="42601", message="syntax error: the statement could not be tokenized",
                         hint="check quotes and comments")
        return Route("catalog") if head in CATALOG_HEADS else _not_catalog(head)
    if isinstance(tree, exp.Copy):
        return Route("error", sqlstate="0A000", message="COPY is not supported by dpsql",
                     hint="run the aggregate query directly")
    if isinstance(tree, _WRITE_NODES):
        verb = tree.key.upper().replace("TRUNCATETABLE", "TRUNCATE")
        return Route("error", sqlstate="25006", message=f"cannot execute {verb} in a read-only transaction",
                     hint="dpsql answers queries only; data is loaded by the operator")
    if not isinstance(tree, (exp.Query, exp.Values)):
        return Route("error", sqlstate="0A000", message="statement not supported by dpsql",
                     hint="send SELECT statements")
    if tree.find(exp.Into) is not None:
        return Route("error", sqlstate="25006", message="cannot execute SELECT INTO in a read-only transaction",
                     hint="dpsql answers queries only")
    found_private, found_catalog, unknown = _relations(tree, private)
    if found_private and (found_catalog or unknown):
        return Route("error", sqlstate="0A000",
                     message="a query cannot combine private tables with catalog or other relations",
                     hint="query the private table on its own")
    if found_private:
        return Route("engine", tree=tree)
    if unknown:
        name = sorted(unknown)[0]
        return Route("error", sqlstate="42P01", message=f'relation "{name}" does not exist',
                     hint=f"private tables: {', '.join(sorted(private))}" if private else None)
    if isinstance(tree, exp.Select):
        signal = _signal_item(tree)
        if signal is not None:
            return Route("local", items=signal, tree=tree)
    if isinstance(tree, exp.Select) and not found_catalog:
        items = _local_items(tree)
        if items is not None:
            return Route("local", items=items, tree=tree)
    if head not in CATALOG_HEADS:
        return _not_catalog(head)
    return Route("catalog", tree=tree, budget=bool(_budget_tables(tree)))


def qmark_parameters(tree: exp.Expr) -> tuple[str, list[int]] | None:
    """Rewrite ``$n`` parameters to ``?`` for the DP compiler.

    Returns the SQL and, for each ``?`` in the compiler's binding order (pre-order walk, as
    ``dpsql.sql.parse`` does), the 0-based index of the client's parameter; None when the
    statement has no ``$n`` parameters (the original text is then used unchanged)."""
    tree = tree.copy()
    params = [n for n in tree.walk() if isinstance(n, exp.Parameter)]
    if not params:
        return None
    order: list[int] = []
    for node in params:
        try:
            order.append(int(node.this.name) - 1)
        except (AttributeError, ValueError):
            return None
        node.replace(exp.Placeholder())
    return tree.sql("postgres"), order
