"""The test run's own schedule (tests/conftest.py): the files whose tests take the Spark
session are exactly the ones that pytest-xdist runs as one unit, so that one JVM starts."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _spark_files_declared() -> set[str]:
    tree = ast.parse((ROOT / "tests" / "conftest.py").read_text())
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        if [t.id for t in node.targets if isinstance(t, ast.Name)] == ["SPARK_FILES"]:
            call = node.value
            assert isinstance(call, ast.Call) and isinstance(call.args[0], ast.Set)
            return {ast.literal_eval(e) for e in call.args[0].elts}
    raise AssertionError("tests/conftest.py has no SPARK_FILES")


def _takes_spark(path: Path) -> bool:
    """A test or helper with a ``spark`` argument, or a ``request.getfixturevalue("spark")``
    (parametrized engine tests ask for the session only on Spark's case)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef) and "spark" in {a.arg for a in node.args.args}:
            return True
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "getfixturevalue"
                and any(isinstance(a, ast.Constant) and a.value == "spark" for a in node.args)):
            return True
    return False


def test_every_file_that_takes_the_spark_session_is_scheduled_with_the_others():
    used = {p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("test_*.py") if _takes_spark(p)}
    assert used, "no test takes the spark fixture: the detection is broken"
    assert used == _spark_files_declared()
