# NetBox configuration for fleetd's test and lab instances: everything comes from the environment set by
# tests/scripts/netbox/install.sh (template build) and tests/src/harness/netbox.ts (each run). Loopback only.
import os


def _env(name):
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"fleetd NetBox configuration: {name} is not set")
    return value


ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "netbox",
        "USER": "netbox",
        "PASSWORD": _env("FLEETD_NB_DB_PASSWORD"),
        "HOST": "127.0.0.1",
        "PORT": _env("FLEETD_NB_DB_PORT"),
        "CONN_MAX_AGE": 300,
    }
}
_redis = {
    "HOST": "127.0.0.1",
    "PORT": int(_env("FLEETD_NB_REDIS_PORT")),
    "USERNAME": "",
    "PASSWORD": _env("FLEETD_NB_REDIS_PASSWORD"),
    "SSL": False,
}
REDIS = {"tasks": {**_redis, "DATABASE": 0}, "caching": {**_redis, "DATABASE": 1}}
SECRET_KEY = _env("FLEETD_NB_SECRET_KEY")
API_TOKEN_PEPPERS = {1: _env("FLEETD_NB_PEPPER")}
CENSUS_REPORTING_ENABLED = False
ISOLATED_DEPLOYMENT = True
RELEASE_CHECK_URL = None
# Webhook deliveries go to a loopback receiver; fail fast. NetBox does not retry by default (RQ_RETRY_MAX 0):
# fleetd's reconcile loop is what catches a lost delivery.
WEBHOOK_DEFAULT_TIMEOUT = 10
# Webhook deliveries on the "high" queue, which the worker drains first: they never wait behind the search-index
# jobs that every object change enqueues on "default" (the same setting is advisable in production).
QUEUE_MAPPINGS = {"webhook": "high"}
RQ_DEFAULT_TIMEOUT = 60
CHANGELOG_RETENTION = 0
TIME_ZONE = "UTC"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("FLEETD_NB_LOG_LEVEL", "WARNING")},
}
