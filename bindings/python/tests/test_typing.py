"""The stubs agree with the runtime (mypy's stubtest), and type-check use.

mypy is installed into the venv by scripts/setup.sh; without it these tests
fail rather than skip, so a missing tool cannot hide stale stubs.
"""

import subprocess
import sys
import textwrap

import pytest


def run(*args, cwd):
    result = subprocess.run(
        [sys.executable, "-m", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return result.returncode, result.stdout + result.stderr


@pytest.mark.timeout(320)
def test_stubs_match_the_runtime(tmp_path):
    # No allowlist: every difference is an error.
    code, out = run("mypy.stubtest", "flowctrl", cwd=tmp_path)
    assert code == 0, out


USE = """
    from typing import Optional
    import flowctrl

    def serve(task: flowctrl.Task) -> str:
        try:
            with task.acquire(2) as permit:
                n: int = permit.n
            return "ok"
        except flowctrl.Limited as e:
            return e.reason
        except flowctrl.FlowctrlError as e:
            return str(e)

    def count(path: str) -> int:
        with flowctrl.Table(path, capacity=8) as table:
            task = table.task("api", local_rate=10.0, burst=2)
            p: Optional[flowctrl.Permit] = task.try_acquire()
            if p is not None:
                p.release("dropped")
            stats: flowctrl.Stats = task.stats()
            rows: list[flowctrl.ProcessStats] = task.stats_by_process()
            consistent: flowctrl.Consistency = task.check()
            report: flowctrl.TableCheck = table.check()
            settings: flowctrl.Settings = task.settings
            closed: bool = table.closed
        table.close()
        return stats["admitted"] + len(rows) + settings["burst"] + consistent["drift"] + len(report["drift"])

    # __exit__ returns None: the blocks cannot swallow an exception, so
    # nothing is missing after them.
    def capacity(table: flowctrl.Table) -> int:
        with table:
            return table.capacity

    def held(task: flowctrl.Task) -> int:
        with task.acquire() as permit:
            return permit.n

    def bad(task: flowctrl.Task) -> None:
        task.acquire().release("maybe")
"""


@pytest.mark.timeout(320)
def test_use_type_checks(tmp_path):
    (tmp_path / "use.py").write_text(textwrap.dedent(USE))
    code, out = run("mypy", "--strict", "--no-incremental", "use.py", cwd=tmp_path)
    # Only the deliberate mistake is reported: an outcome that does not exist.
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 1 and "'maybe'" in errors[0], out
    assert code == 1, out


MIDDLEWARE = """
    from typing import Optional
    import flowctrl
    from flask import Flask
    from flowctrl import asgi, wsgi
    from starlette.applications import Starlette
    from starlette.middleware import Middleware

    table = flowctrl.Table("t")
    api = table.task("api", max_concurrency=8)

    def client(scope: asgi.Scope) -> Optional[str]:
        return None if scope.get("client") is None else str(scope["client"][0])

    app = Starlette(middleware=[Middleware(asgi.RateLimitMiddleware, task=api, key=client, cost=1)])
    app.add_middleware(asgi.RateLimitMiddleware, task=api, key=asgi.header("X-API-Key"), timeout=0.05)

    flask_app = Flask(__name__)
    flask_app.wsgi_app = wsgi.RateLimitMiddleware(  # type: ignore[method-assign]
        flask_app.wsgi_app, task=api, key=wsgi.header("X-API-Key"), rate_limit_headers=False
    )
    plain: wsgi.WSGIApp = wsgi.RateLimitMiddleware(flask_app, task=api, cost=lambda environ: 2)
"""


@pytest.mark.timeout(320)
def test_middleware_type_checks_with_starlette_and_flask(tmp_path):
    (tmp_path / "mw.py").write_text(textwrap.dedent(MIDDLEWARE))
    code, out = run("mypy", "--strict", "--no-incremental", "mw.py", cwd=tmp_path)
    assert code == 0, out
