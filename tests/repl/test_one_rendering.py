"""Value ± error is rendered one way (issue 36 item 4): ``dpsql query`` (``cli.print_result``)
and the shell (``repl.render.result_lines``) both draw the table with
``dpsql.display.table_lines`` and add the same notes, in every error mode.  (They were two
renderers once; this holds them together: values, errors, inferred ranges, binned bounds,
NULLs and the footer.)"""

from __future__ import annotations

import io
import math

import pytest

from dpsql.cli import print_result
from dpsql.engine.results import Column, Result
from repl.render import result_lines


def _result() -> Result:
    nan = math.nan
    return Result(columns=[Column("sex", "text"), Column("count", "integer"), Column("avg_age", "double")],
                  rows=[("Female", 16192.4, 36.8579), ("Male", 32650.2, 39.4335), (None, 12.0, 1e-300)],
                  stderr=[(None, 105.2, 0.0871), (None, 107.9, nan), (None, 40.0, 3.0)],
                  inferred=[False, True, False],
                  bounds=[(None, None, None), (None, None, (17.0, 90.0)), (None, None, None)],
                  bias=[(None, None, 0.4), (None, None, None), (None, None, None)])


@pytest.mark.parametrize("mode", ["ci95", "stderr", "off"])
def test_the_cli_and_the_shell_print_the_same_table(mode):
    out = io.StringIO()
    print_result(_result(), out=out, mode=mode)
    cli = out.getvalue().splitlines()
    shell = result_lines(_result(), mode, timing=False)
    assert cli == shell
    assert any("±" in line for line in cli) == (mode != "off")
