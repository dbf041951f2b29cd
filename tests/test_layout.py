"""The package layout of docs/architecture.md: imports flow downward, no file pairs import
each other, and the engine never imports a front end (issue 17: engine/demo.py imported
the CLI, repl/app.py and repl/commands.py imported each other)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FRONT_ENDS = ("dpsql.cli", "dpsql.dbapi", "dpsql.server", "dpsql.demo", "dpsql.draft", "repl")


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _imports(path: Path) -> set[str]:
    """Every module imported anywhere in the file (also inside functions and TYPE_CHECKING)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from dpsql import errors` imports dpsql.errors; `from x.y import f`, x.y
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.add(sub if _is_module(sub) else node.module)
    return out


def _is_module(name: str) -> bool:
    base = ROOT.joinpath(*name.split("."))
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def _files():
    """The engine, the model and the front ends other than the server."""
    return ([p for d in ("dpsql/engine", "dpsql/pgm", "repl") for p in (ROOT / d).rglob("*.py")]
            + [ROOT / "dpsql" / f for f in ("cli.py", "demo.py", "draft.py", "display.py", "dbapi.py")])


def test_the_engine_never_imports_a_front_end():
    for path in (ROOT / "dpsql" / "engine").rglob("*.py"):
        bad = [m for m in _imports(path) if m.startswith(FRONT_ENDS)]
        assert not bad, f"{path.name} imports {bad}"


def test_no_two_files_import_each_other():
    """Across the whole package (lazy and TYPE_CHECKING imports count): dpsql.domain imported
    dpsql.temporal inside a function and dpsql.measure.source and .views named each other
    for annotations (the shared piece moved down: dpsql/domain_file.py, views.HopSource)."""
    modules = {_module(p): p for d in ("dpsql", "repl") for p in (ROOT / d).rglob("*.py")}
    graph = {m: {i for i in _imports(p) if i in modules and i != m} for m, p in modules.items()}
    pairs = sorted({tuple(sorted((a, b))) for a, deps in graph.items() for b in deps if a in graph.get(b, ())})
    assert not pairs, pairs


def test_readme_says_how_to_run_dpsql_and_how_to_get_pandas():
    """Issue 17 item 7: after `make demo` dpsql lives in .venv/bin; pandas and psycopg are
    extras a user can install."""
    readme = (ROOT / "README.md").read_text()
    assert ".venv/bin/dpsql" in readme and ". .venv/bin/activate" in readme
    assert "dpsql[pandas]" in readme and "dpsql[postgres]" in readme
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(d.startswith("pandas") for d in extras["pandas"])
    assert any(d.startswith("psycopg") for d in extras["postgres"])
    from dpsql.cli import build_parser
    commands = set(build_parser()._subparsers._group_actions[0].choices)
    block = readme.split("activate the environment once per terminal:", 1)[1].split("```", 2)[1]
    used = {line.split()[1] for line in block.splitlines() if line.startswith("dpsql ")}
    assert used and used <= commands


def test_the_domain_holds_no_sql():
    """The declared domain is the Python rule (``index_of``); its SQL form lives in
    ``dpsql/measure/cellsql.py`` beside the reader, and imports flow downward only."""
    bad = sorted(m for m in _imports(ROOT / "dpsql" / "domain.py")
                 if m.startswith(("sqlglot", "dpsql.measure", "dpsql.sql", "dpsql.engine")))
    assert not bad, bad


def test_sqlglot_is_imported_only_in_the_sql_package():
    """Each third-party library is used in one place: the measurement SQL and the wire
    server's router reach sqlglot through ``dpsql.sql.syntax``."""
    bad = sorted(str(p.relative_to(ROOT)) for p in [*(ROOT / "dpsql").rglob("*.py"), *(ROOT / "repl").rglob("*.py")]
                 if p.parent != ROOT / "dpsql" / "sql" and any(m.split(".")[0] == "sqlglot" for m in _imports(p)))
    assert not bad, bad


def test_plan_does_not_import_pgm():
    """Issue 36 item 5: the planner took the junction-tree size from dpsql.pgm, a sibling;
    both now take the triangulation from dpsql/triangulation.py, below them."""
    bad = sorted((p.relative_to(ROOT).as_posix(), m) for p in (ROOT / "dpsql" / "plan").rglob("*.py")
                 for m in _imports(p) if m.startswith("dpsql.pgm"))
    assert not bad, bad
    assert all(m.startswith("dpsql.triangulation") or not m.startswith("dpsql.")
               for m in _imports(ROOT / "dpsql" / "triangulation.py"))


#: The one place each third-party library is imported (docs/architecture.md): a file, or a
#: package directory ending in "/".  numpy and scipy are the numeric core, used throughout.
ONE_PLACE = {
    "duckdb": "dpsql/measure/backend.py",
    "sqlglot": "dpsql/sql/",
    "psycopg": "dpsql/measure/postgres.py",
    "pyspark": "dpsql/measure/spark.py",
    "threadpoolctl": "dpsql/linalg/threads.py",
    "pandas": "dpsql/dbapi.py",
    "prompt_toolkit": "repl/",
}
NUMERIC_CORE = {"numpy", "scipy"}


def _third_party() -> dict[str, set[str]]:
    """Third-party top-level module -> the package files (relative paths) importing it."""
    used: dict[str, set[str]] = {}
    for p in [*(ROOT / "dpsql").rglob("*.py"), *(ROOT / "repl").rglob("*.py")]:
        for top in {m.split(".")[0] for m in _imports(p)}:
            if top not in sys.stdlib_module_names and top not in ("dpsql", "repl"):
                used.setdefault(top, set()).add(p.relative_to(ROOT).as_posix())
    return used


def test_each_third_party_library_is_imported_in_its_one_place():
    """Issue 36 item 5: duckdb was imported in draft.py and measure/export.py besides the
    backend; a library of a test or of dead code only (networkx) is no import at all."""
    bad = []
    for lib, files in sorted(_third_party().items()):
        if lib in NUMERIC_CORE:
            continue
        place = ONE_PLACE.get(lib)
        bad += [(f, lib) for f in sorted(files) if place is None
                or not (f == place or (place.endswith("/") and f.startswith(place)))]
    assert not bad, bad


def test_every_runtime_dependency_is_imported_by_the_package():
    """A runtime dependency nothing imports (networkx, once only dead code used it) belongs
    in an extra or nowhere."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {d.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip().replace("-", "_")
             for d in deps}
    assert names and not names - set(_third_party()), names - set(_third_party())


def test_every_name_the_package_uses_is_defined():
    """Annotations inside functions are never evaluated (``from __future__ import
    annotations``), so a name missing from the imports there fails no run; engine.py annotated
    ``_strategy_cache`` with ``StrategyCache`` without importing it (issue 28).  pyflakes'
    undefined-name checks (ruff F821, F822) see it; ``make lint`` runs the whole rule set."""
    pytest.importorskip("ruff")
    run = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated",
                          "--select", "F821,F822", "--target-version", "py311", "dpsql", "repl"],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_a_strategy_is_answered_by_one_least_squares():
    """Issue 36 item 4: ``dpsql.plan.reconstruct`` answered a strategy by ``np.linalg.pinv``
    per factor and LSQR (numerics of the BLAS kernel), reached only by its tests, beside the
    engine's ``VarianceModel.least_squares`` on ``GramPinv``.  The planner and the engine
    call neither pinv nor LSQR; tests/plan/test_reconstruct.py runs on the engine's."""
    import dpsql.plan
    assert "least_squares" not in dir(dpsql.plan)
    bad = sorted(p.relative_to(ROOT).as_posix() for d in ("plan", "engine") for p in (ROOT / "dpsql" / d).rglob("*.py")
                 if re.search(r"\blsqr\(|linalg\.pinv\(", p.read_text()))
    assert not bad, bad


def test_the_engine_is_built_of_collaborators_not_mixins():
    """Issue 36 item 3: engine.py was split by concept, but the fitting became ``ModelFitting``,
    a base class of ``Engine`` that read the engine's attributes, declared for the type checker
    in an ``if TYPE_CHECKING:`` block of its body.  Each part is now an object given what it
    uses (``engine.models``, a ``ModelStore``): ``Engine`` has no base class, and no class of
    ``dpsql.engine`` declares attributes that another class provides."""
    classes = {}
    for path in sorted((ROOT / "dpsql" / "engine").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                classes[f"{path.name}:{node.name}"] = node
    engine = classes["engine.py:Engine"]
    assert not engine.bases, [ast.unparse(b) for b in engine.bases]
    declared = sorted(name for name, node in classes.items()
                      for stmt in node.body if isinstance(stmt, ast.If) and "TYPE_CHECKING" in ast.unparse(stmt.test))
    assert not declared, declared


@pytest.mark.parametrize("module, cls", [("fitting", "ModelStore"), ("measuring", "Measurer"),
                                         ("planning", "Planner")])
def test_the_engines_parts_sit_below_it_and_are_given_what_they_use(module, cls):
    """Issue 36 item 3: planning, measuring and fitting each have their module, below ``engine.py``
    (neither imports it nor a front end), and their class is built with explicit arguments,
    never the engine itself (which would let it read any of the engine's attributes)."""
    path = ROOT / "dpsql" / "engine" / f"{module}.py"
    assert path.exists(), path
    assert not {m for m in _imports(path) if m in ("dpsql.engine.engine", "dpsql.engine.session")
                or m.startswith(FRONT_ENDS)}
    tree = ast.parse(path.read_text())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    init = next(f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
    names = [a.arg for a in init.args.args + init.args.kwonlyargs]
    assert "engine" not in names and len(names) > 2, names


#: The line count a package file stays under (the project's style guide: "files under ~800 lines;
#: split by concept before that").
MAX_LINES = 800


def test_package_files_stay_under_the_line_limit():
    """engine/session.py had grown to 850 lines; its answer post-processing (``Column``,
    ``Result``, answers with standard errors, bounds, rows, error columns) is now
    engine/results.py, below the session: it imports neither the session nor the engine."""
    long = sorted((p.relative_to(ROOT).as_posix(), n) for d in ("dpsql", "repl") for p in (ROOT / d).rglob("*.py")
                  if (n := len(p.read_text().splitlines())) > MAX_LINES)
    assert not long, long
    results = ROOT / "dpsql" / "engine" / "results.py"
    assert not {m for m in _imports(results) if m in ("dpsql.engine.engine", "dpsql.engine.session")}
