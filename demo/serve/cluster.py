"""Start or join a Ray cluster and deploy the arena on it; take it all down again.

Used by `python -m demo.serve`, by the tests and by the overhead benchmark, so that all
three start the cluster the same way: small (a reserved CPU count, the object store capped,
no dashboard) and, for a local cluster, on 127.0.0.1 only.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Optional

from .config import ServeConfig

REPO = Path(__file__).resolve().parents[2]

# A one-node cluster on a loopback-only machine: keep every Ray address on 127.0.0.1 (without
# the first, Ray moves the node to the eth0 address), send no usage statistics, and let the
# proxy route by the page's session cookie (sticky sessions for several page replicas); the
# proxy's uvicorn believes no X-Forwarded-For (demo.web.site.distrust_forwarded_headers: the
# page's visitor rule reads that header itself, where the launch says a proxy writes it).
LOCAL_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_SERVE_SESSION_ID_HEADER_KEY": "cookie",
    "FORWARDED_ALLOW_IPS": "",
}
OBJECT_STORE_MB = 500  # Ray's default reserves ~30 % of memory; a race's events are small

# Replicas on other machines import this package from a copy Ray uploads (working_dir); only
# the code and models.yaml travel, never the venv, caches, models or recordings.
UPLOAD_EXCLUDES = [".git", ".venv", ".cache*", "bench-results", "recordings", "artifacts", "docs", "tests",
                   "scripts", "**/__pycache__", "*.png", "*.json"]


def start(address: str = "local", num_cpus: Optional[int] = None, object_store_mb: int = OBJECT_STORE_MB,
          runtime_env: Optional[dict] = None) -> None:
    """Start a one-node cluster on 127.0.0.1 (`local`) or join one (`HOST:PORT` of its head).

    Call it from the main thread (or one that outlives the cluster): the processes of a
    local cluster die with the thread that started them (Ray sets PR_SET_PDEATHSIG).
    """
    for k, v in LOCAL_ENV.items():
        os.environ.setdefault(k, v)
    import ray

    if address == "local":
        from ..core.settings import cpu_cores

        # Ray turns token auth on for a new local cluster (RAY_AUTH_MODE unset); give it a
        # token that lives only as long as this process, or it writes one to
        # ~/.ray/auth_token for good. (Setting RAY_AUTH_MODE here would come too late when
        # ray is already imported: it reads the mode once.)
        os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))

        env = {"env_vars": {"PYTHONPATH": _pythonpath()}}
        env.update(runtime_env or {})
        # address="local": always a new cluster, never one that RAY_ADDRESS or a `ray start`
        # left in /tmp/ray/ray_current_cluster points to.
        ray.init(address="local", num_cpus=num_cpus or cpu_cores(), object_store_memory=object_store_mb << 20,
                 include_dashboard=False, _node_ip_address="127.0.0.1", runtime_env=env,
                 log_to_driver=False, configure_logging=False)
    else:
        from ray.exceptions import AuthenticationError

        from ..core.errors import DemoError

        env = runtime_env if runtime_env is not None else {"working_dir": str(REPO), "excludes": UPLOAD_EXCLUDES}
        try:
            ray.init(address=address, runtime_env=env, log_to_driver=False)
        except AuthenticationError:
            raise DemoError(f"The cluster at {address} requires Ray's auth token; set RAY_AUTH_TOKEN (or copy the "
                            "token into ~/.ray/auth_token) as on its nodes, and RAY_AUTH_MODE=token.") from None
        except ConnectionError as e:
            raise DemoError(f"No Ray cluster answers at {address} ({str(e).splitlines()[0][:120]}); start its head "
                            "with `ray start --head` or check the address.") from None


def _pythonpath() -> str:
    extra = os.environ.get("PYTHONPATH")
    return f"{REPO}{os.pathsep}{extra}" if extra else str(REPO)


DEPLOY_TIMEOUT_S = 600.0  # the replicas prepare (maybe convert) and load their models first


def deploy(config: ServeConfig, host: str = "127.0.0.1", port: int = 8000,
           timeout_s: float = DEPLOY_TIMEOUT_S) -> str:
    """Deploy the arena (the cluster must be started); return the page's URL once every
    deployment is up (the pipelines loaded and warmed up). Past `timeout_s`, raise a
    DemoError that names the deployments still waiting and why (the app keeps deploying on
    a cluster: `python -m demo.serve --address … --shutdown` takes it down)."""
    import threading

    from ray import serve

    from ..core.errors import DemoError
    from .deployments import build_app

    http = {"host": host, "port": port, **{k: v for k, v in config.http_options.items() if k not in ("host", "port")}}
    serve.start(http_options=http, **({"proxy_location": config.proxy_location} if config.proxy_location else {}))
    app = build_app(config.args, config.deployments)
    outcome: dict = {}

    def run() -> None:
        try:
            serve.run(app, name=config.name, route_prefix=config.route_prefix, blocking=False)
            outcome["ok"] = True
        except BaseException as e:  # re-raised below, in the caller's thread
            outcome["error"] = e

    thread = threading.Thread(target=run, name="serve-run", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if "error" in outcome:
        raise outcome["error"]
    if "ok" not in outcome:
        raise DemoError(f"The arena was not up after {timeout_s:.0f} s: {waiting_for(config.name)}.")
    return f"http://{host}:{port}{config.route_prefix}"


def waiting_for(app_name: str) -> str:
    """What an application still waits for, in words (for a deploy that takes too long)."""
    import ray
    from ray import serve

    try:
        deployments = serve.status().applications[app_name].deployments
    except Exception as e:  # noqa: BLE001 - this only explains another failure
        return f"its status could not be read ({type(e).__name__})"
    waiting = [f"{name} ({d.status}: {d.message.splitlines()[0][:160]})" if d.message else f"{name} ({d.status})"
               for name, d in deployments.items() if str(d.status).split(".")[-1] != "HEALTHY"]
    free = {k: v for k, v in ray.available_resources().items() if k in ("CPU", "memory")}
    return (f"waiting for {'; '.join(waiting) or 'nothing'}; the cluster has free {free}: give it more nodes or "
            "lower num_cpus/memory in the config")


def stop() -> None:
    """Take the arena and (for a cluster this process started) Ray down; never raises."""
    try:
        from ray import serve

        serve.shutdown()
    except Exception:
        pass
    try:
        import ray

        ray.shutdown()
    except Exception:
        pass
