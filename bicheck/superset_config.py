# Superset configuration for `make bi-check` (bicheck/drive.py sets BICHECK_OUT).  A throwaway
# instance on 127.0.0.1: SQLite metadata in the run's output directory, no CSRF on the REST API
# (driven by a script), no caches (every chart request reaches dpsql), no rate limits.
import os
import secrets

_OUT = os.environ["BICHECK_OUT"]
SECRET_KEY = os.environ.get("BICHECK_SECRET") or secrets.token_hex(32)
SQLALCHEMY_DATABASE_URI = f"sqlite:///{_OUT}/superset.db"
WTF_CSRF_ENABLED = False
TALISMAN_ENABLED = False
RATELIMIT_ENABLED = False
AUTH_RATE_LIMITED = False
CACHE_CONFIG = {"CACHE_TYPE": "NullCache"}
DATA_CACHE_CONFIG = {"CACHE_TYPE": "NullCache"}
FILTER_STATE_CACHE_CONFIG = {"CACHE_TYPE": "SimpleCache"}
EXPLORE_FORM_DATA_CACHE_CONFIG = {"CACHE_TYPE": "SimpleCache"}
THUMBNAIL_CACHE_CONFIG = {"CACHE_TYPE": "NullCache"}
FEATURE_FLAGS = {"THUMBNAILS": False, "ALERT_REPORTS": False}
SQLLAB_ASYNC_TIME_LIMIT_SEC = 60
SUPERSET_WEBSERVER_TIMEOUT = 120
LOG_LEVEL = "WARNING"
