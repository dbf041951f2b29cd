"""sqlglot's fallback warnings are dropped by one filter, never by flipping the logger's level
(issue 36 item 4: the level is process-global; save/set/restore around each parse races between
the server's parse threads and overrode the host application's logging configuration)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

_SCRIPT = textwrap.dedent("""
    import logging, threading
    records = []
    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())
    sqlglot_logger = logging.getLogger("sqlglot")
    sqlglot_logger.setLevel(logging.DEBUG)          # the host application's choice
    sqlglot_logger.addHandler(Keep())
    from dpsql.sql.parse import parse_statement as parse_data
    from dpsql.sql.session_commands import parse_session_command
    from dpsql.sql.syntax import parse_statement
    assert sqlglot_logger.level == logging.DEBUG, sqlglot_logger.level

    def work():
        for i in range(150):
            parse_session_command(f"SHOW dpsql.setting_{i}")
            parse_statement(f"SHOW whatever_{i}")
    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads: t.start()
    for t in threads: t.join()
    assert sqlglot_logger.level == logging.DEBUG, sqlglot_logger.level
    assert not records, records[:3]
    # an ERROR from sqlglot still reaches the host's handler
    sqlglot_logger.error("kept")
    assert records == ["kept"], records
    print("ok")
""")


def test_importing_and_parsing_leave_the_hosts_sqlglot_level_and_drop_fallback_warnings(tmp_path):
    done = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"
