"""A NetBox fork server for the test suite (tests/src/harness/netboxZygote.ts).

Every test file starts its own NetBox (its own PostgreSQL, Redis, web server and RQ worker). Importing NetBox
(Django, every app, the URL configuration with the GraphQL schema) costs each web server and each worker about
6 s of CPU, some 8 CPU-minutes over a suite run of ~40 NetBox instances on a 2-core machine. This process imports
NetBox once, with no database or Redis reachable (nothing connects at import), then forks a web server or a
worker per request; the child points the already-loaded settings at its own instance's PostgreSQL, Redis and
directories before Django opens any connection, and runs the management command exactly as `netbox <args>` would.

Protocol: one JSON object per connection on the Unix socket given as argv[1]:
  {"argv": ["runserver", ...], "env": {...}, "cwd": "...", "log": "/path", "owner": <pid>}
answered with {"pid": <child pid>} or {"error": "..."}. The child:
  - starts a session of its own (its pid is its process group: the harness signals the group, as for a spawned one);
  - writes stdout/stderr to `log` and, when it exits, "<code>" to `log`.exit;
  - exits when `owner` (the test process) is gone, checked every second: a killed test leaves no NetBox behind
    (what `setpriv --pdeathsig` does for a spawned one).
Only the variables NetBox's configuration reads per instance may differ between requests (ports, roots, log level);
the secrets are the template's and the same for every instance.
"""

import json
import os
import re
import signal
import socket
import sys
import threading
import time

PER_INSTANCE = {"FLEETD_NB_DB_PORT", "FLEETD_NB_REDIS_PORT", "NETBOX_ROOT", "FLEETD_NB_LOG_LEVEL"}


def main() -> None:
    path = sys.argv[1]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "netbox.settings")
    import django

    django.setup()
    import netbox.urls  # noqa: F401  (the URL configuration: GraphQL schema, every API view)
    from django.conf import settings

    # what the forked commands import on their own
    import django.core.servers.basehttp  # noqa: F401
    import django.contrib.staticfiles.management.commands.runserver  # noqa: F401
    import django_rq.management.commands.rqworker  # noqa: F401

    base_env = dict(os.environ)
    signal.signal(signal.SIGCHLD, reap)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    srv.bind(path)
    srv.listen(16)
    print(f"netbox zygote ready on {path} (pid {os.getpid()})", flush=True)
    while True:
        try:
            conn, _ = srv.accept()
        except InterruptedError:
            continue
        with conn:
            data = b""
            while not data.endswith(b"\n"):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            try:
                req = json.loads(data)
                pid = os.fork()
                if pid == 0:
                    srv.close()
                    conn.close()
                    child(req, base_env, settings)  # never returns
                reply = {"pid": pid}
            except Exception as e:  # a bad request or a failed fork: answered, the server goes on
                reply = {"error": f"{type(e).__name__}: {e}"}
            conn.sendall((json.dumps(reply) + "\n").encode())


def reap(_sig, _frame) -> None:
    """Children are reaped at once (a zombie would look alive to the harness); their exit code is in `log`.exit."""
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def child(req: dict, base_env: dict, settings) -> None:
    code = 1
    log = req["log"]
    try:
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.close(null)
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        env = req["env"]
        differing = sorted(k for k in set(env) | set(base_env) if k.startswith(("FLEETD_NB_", "NETBOX_")) and env.get(k) != base_env.get(k) and k not in PER_INSTANCE)
        if differing:
            raise RuntimeError(f"the zygote was started with other values of {differing}: start it again")
        os.environ.clear()
        os.environ.update(env)
        os.chdir(req["cwd"])
        point_settings(settings, env)
        owner = int(req["owner"])
        threading.Thread(target=watch_owner, args=(owner,), daemon=True).start()
        from django.core.management import execute_from_command_line

        sys.argv = ["netbox", *req["argv"]]
        try:
            execute_from_command_line(sys.argv)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException as e:  # noqa: BLE001  (reported in the log, exit 1)
        try:
            print(f"netbox zygote child: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        except Exception:
            pass
    finally:
        try:
            with open(log + ".exit", "w") as f:
                f.write(str(code))
        except Exception:
            pass
        os._exit(code)


def point_settings(settings, env: dict) -> None:
    """The imported settings, in place (the dicts Django, django-redis and django-rq read lazily)."""
    settings.DATABASES["default"]["PORT"] = env["FLEETD_NB_DB_PORT"]
    port = int(env["FLEETD_NB_REDIS_PORT"])
    for q in settings.RQ_QUEUES.values():
        q["PORT"] = port
    for c in settings.CACHES.values():
        if isinstance(c.get("LOCATION"), str):
            c["LOCATION"] = re.sub(r":\d+/", f":{port}/", c["LOCATION"], count=1)
    root = env["NETBOX_ROOT"].rstrip("/")
    settings.NETBOX_ROOT = root
    settings.MEDIA_ROOT = os.path.join(root, "media")
    settings.REPORTS_ROOT = os.path.join(root, "reports")
    settings.SCRIPTS_ROOT = os.path.join(root, "scripts")
    settings.STATIC_ROOT = os.path.join(root, "static")
    import logging

    logging.getLogger().setLevel(env.get("FLEETD_NB_LOG_LEVEL", "WARNING"))


def watch_owner(owner: int) -> None:
    while True:
        time.sleep(1)
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            os.killpg(0, signal.SIGKILL)
        except PermissionError:
            pass


if __name__ == "__main__":
    main()
