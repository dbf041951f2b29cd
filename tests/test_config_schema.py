"""dpsql.toml is checked from one declared schema (dpsql/config_schema.py; issue 36 item 4).

Before, the engine, the sources and the wire server each checked their keys by hand and the
``[server]`` keys twice (names in the engine, values in the server): a value of the wrong
type crashed with a bare ValueError/TypeError, was silently coerced, or loaded in the engine
while ``dpsql serve`` refused it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from dpsql import Error
from dpsql.engine.config import PlannerOptions, load_config
from dpsql.errors import ConfigError
from dpsql.server.config import ServerConfig, load_server_config
from dpsql.testing import write_config

ROOT = Path(__file__).resolve().parents[1]
QUERY = ["SELECT sex, COUNT(*) FROM adult GROUP BY sex"]


@pytest.mark.parametrize("where, key, value", [
    ("dpsql", "fit_iters", "many"),          # was a ValueError from int()
    ("planner", "seed", 1.5),                # was silently truncated to 1
    ("planner", "restarts", "3"),            # was int("3")
    ("dpsql", "default_user", 3),            # was str(3)
    ("server", "max_connections", "lots"),   # loaded in the engine; only dpsql serve refused it
    ("server", "estimator", "ols"),          # the same
    ("budget", "delta", "small"),            # was a ValueError from float()
    ("policy", "allow_spend", "yes"),
    ("planner", "max_model_cells", 0),       # a cap of no cells
])
def test_a_wrong_type_or_value_is_a_config_error_naming_the_file_and_key(tmp_path, where, key, value):
    own = where in ("dpsql", "planner", "budget")      # write_config's own keyword sections
    path = write_config(tmp_path, queries=QUERY, sections={} if own else {where: {key: value}},
                        **({where: {key: value}} if own else {}))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    err = info.value
    assert isinstance(err, Error) and err.sqlstate == "F0000"
    assert str(path) in str(err) and key in str(err) and err.hint


def test_a_table_with_a_domain_that_is_not_a_path_is_refused(tmp_path):
    path = write_config(tmp_path, queries=QUERY)
    text = re.sub(r'domain = "[^"]*"', "domain = 3", path.read_text(), count=1)
    path.write_text(text)
    with pytest.raises(ConfigError, match="domain must be a string"):    # was a TypeError from Path(3)
        load_config(path)


def test_the_engine_and_the_server_refuse_the_same_server_sections(tmp_path):
    """One declaration of [server]: what ``dpsql serve`` refuses, ``dpsql.connect`` refuses."""
    for bad in ({"max_statment_bytes": 1}, {"error_columns": "always"}, {"auth_timeout": -1},
                {"users": {"alice": {"budget": 1}}}, {"users": {"alice": {"connection_limit": 1.5}}},
                {"query_log_files": True}):
        path = write_config(tmp_path, queries=QUERY, sections={"server": bad})
        with pytest.raises(ConfigError):
            load_server_config(path)
        with pytest.raises(ConfigError):
            load_config(path)
    good = {"max_connections": 10, "auth_timeout": 2, "error_columns": "off",
            "users": {"alice": {"estimator": "least_squares", "connection_limit": 3}}}
    path = write_config(tmp_path, queries=QUERY, sections={"server": good})
    load_config(path)
    cfg = load_server_config(path)
    assert cfg.max_connections == 10 and cfg.auth_timeout == 2.0 and isinstance(cfg.auth_timeout, float)
    assert cfg.settings == {"dpsql.error_columns": "off"}
    assert cfg.user_settings == {"alice": {"dpsql.estimator": "least_squares"}}
    assert cfg.user_connection_limits == {"alice": 3}


def test_defaults_are_the_schemas():
    from dpsql.config_schema import SCHEMA, default
    planner = PlannerOptions()
    for key in SCHEMA["planner"].keys:
        assert getattr(planner, key) == default("planner", key)
    server = ServerConfig()
    for key, spec in SCHEMA["server"].keys.items():
        if spec.default is not None and key != "error_columns":
            assert getattr(server, key) == spec.default
    assert server.settings == {"dpsql.error_columns": default("server", "error_columns")}


def test_source_keys_follow_the_source_kind():
    from dpsql.config_schema import check
    check({"csv": "a.csv", "delimiter": ";"}, "source", "f.toml", kind="csv")
    with pytest.raises(ConfigError, match="unknown key 'delimiter'"):
        check({"parquet": "a.parquet", "delimiter": ";"}, "source", "f.toml", kind="parquet")
    with pytest.raises(ConfigError, match="header must be true or false"):
        check({"csv": "a.csv", "header": "yes"}, "source", "f.toml", kind="csv")


# -- docs/config.md and the schema describe the same keys ----------------------------------

def _documented_toml() -> list[dict]:
    """The TOML blocks of docs/config.md; a block listing alternatives of one key
    (``source = …`` per line) is read line by line."""
    text = (ROOT / "docs" / "config.md").read_text()
    out = []
    for block in re.findall(r"```toml\n(.*?)```", text, re.S):
        try:
            out.append(tomllib.loads(block))
        except tomllib.TOMLDecodeError:
            out += [{"tables": {"t": tomllib.loads(line)}} for line in block.splitlines() if line.strip()]
    return out


def test_every_documented_example_follows_the_schema():
    from dpsql.config_schema import check
    blocks = _documented_toml()
    assert len(blocks) >= 3
    for doc in blocks:
        check(doc, "", "docs/config.md")
        for table in doc.get("tables", {}).values():
            if "source" in table:
                kind = next(k for k in ("spark", "csv", "parquet", "duckdb", "postgres") if k in table["source"])
                check(table["source"], "source", "docs/config.md", kind=kind)


def test_every_key_of_the_schema_is_documented():
    from dpsql.config_schema import SCHEMA
    text = (ROOT / "docs" / "config.md").read_text()

    def documented(key: str) -> bool:   # `key`, key = …, [a.key.b] or { …, key, … }
        k = re.escape(key)
        return bool(f"`{key}`" in text or re.search(rf"(^|[\s{{,]){k} =", text, re.M)
                    or re.search(rf"\[[\w.]*\b{k}\b[\w.]*\]", text) or re.search(rf"\{{[^}}]*\b{k}\b[^}}]*\}}", text))

    missing = sorted(f"{name}.{key}" for name, section in SCHEMA.items() for key in section.keys
                     if not documented(key))
    assert not missing, missing
