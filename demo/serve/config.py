"""serve.yaml: Ray Serve's own config file format, read here without Ray.

The same file works two ways: `python -m demo.serve --config serve.yaml` (this module reads
it and applies each deployment's options), and Ray's own `serve run serve.yaml` /
`serve deploy serve.yaml` (Ray reads it). Only the parts this project uses are checked:
one application whose import_path is demo.serve.deployments:app_builder, its `args`, its
`deployments` (by name: Baseline, Speculative, Race, Page) and `http_options`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..core.errors import DemoError

IMPORT_PATH = "demo.serve.deployments:app_builder"
DEPLOYMENT_NAMES = ("Baseline", "Speculative", "Race", "Page")
ARGS = ("preset", "models", "cache_dir", "allow_downloads", "memory_budget_gb", "max_pipelines", "kiosk", "idle_seconds",
        "keep_prompts", "batch_requests", "crossover")
MAX_BATCH_REQUESTS = 16
DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "serve.yaml"


@dataclass
class ServeConfig:
    name: str = "arena"
    route_prefix: str = "/"
    args: dict = field(default_factory=dict)
    deployments: dict = field(default_factory=dict)   # name -> options (without "name")
    http_options: dict = field(default_factory=dict)
    proxy_location: Optional[str] = None
    runtime_env: dict = field(default_factory=dict)


def load(path: Optional[Path] = None) -> ServeConfig:
    import yaml

    path = Path(path) if path is not None else DEFAULT_CONFIG
    where = f"{path}"
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        raise DemoError(f"Cannot read the Serve config {where} ({e.strerror}); pass --config PATH.") from None
    except yaml.YAMLError as e:
        raise DemoError(f"The Serve config {where} is not valid YAML ({str(e).splitlines()[0]}).") from None
    return parse(data, where)


def parse(data, where: str = "serve.yaml") -> ServeConfig:
    if not isinstance(data, dict) or not isinstance(data.get("applications"), list) or len(data["applications"]) != 1:
        raise DemoError(f"{where}: expected one entry under `applications:` (Ray Serve's config format).")
    app = data["applications"][0]
    if not isinstance(app, dict):
        raise DemoError(f"{where}: the application must be a mapping.")
    if app.get("import_path") != IMPORT_PATH:
        raise DemoError(f"{where}: import_path must be {IMPORT_PATH}, not {app.get('import_path')!r}.")
    args = app.get("args") or {}
    if not isinstance(args, dict) or set(args) - set(ARGS):
        unknown = sorted(set(args) - set(ARGS)) if isinstance(args, dict) else args
        raise DemoError(f"{where}: unknown args {unknown}; known: {', '.join(ARGS)}.")
    deployments = {}
    for entry in app.get("deployments") or []:
        name = entry.get("name") if isinstance(entry, dict) else None
        if name not in DEPLOYMENT_NAMES:
            raise DemoError(f"{where}: deployment {name!r} is not one of {', '.join(DEPLOYMENT_NAMES)}.")
        options = {k: v for k, v in entry.items() if k != "name"}
        if "num_replicas" in options and "autoscaling_config" in options:
            raise DemoError(f"{where}: deployment {name} sets both num_replicas and autoscaling_config; keep one.")
        deployments[name] = options
    batch = args.get("batch_requests", 1)
    if not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH_REQUESTS:
        raise DemoError(f"{where}: batch_requests must be a whole number from 1 to {MAX_BATCH_REQUESTS}.")
    crossover = args.get("crossover")
    if crossover is not None and (not isinstance(crossover, int) or crossover < 1):
        raise DemoError(f"{where}: crossover must be a whole number of requests (1 or more), or left out.")
    for side in ("Baseline", "Speculative"):
        mor = deployments.get(side, {}).get("max_ongoing_requests", 1)
        if mor != batch:
            raise DemoError(f"{where}: {side} must set max_ongoing_requests: {batch}, as batch_requests says "
                            "(the runs a replica takes at once are the ones it batches).")
    return ServeConfig(name=app.get("name", "arena"), route_prefix=app.get("route_prefix", "/"), args=args,
                       deployments=deployments, http_options=data.get("http_options") or {},
                       proxy_location=data.get("proxy_location"), runtime_env=app.get("runtime_env") or {})


def for_one_machine(conf: ServeConfig, cores: int) -> ServeConfig:
    """The same arena sized for one machine (`python -m demo.serve` without --config): one
    replica of each deployment, the cores split evenly between the two pipelines (as the
    single-machine app's race does), no memory reservations, no session routing."""
    import copy

    conf = copy.deepcopy(conf)
    per_side = max(1, cores // 2)
    for name in DEPLOYMENT_NAMES:
        options = conf.deployments.setdefault(name, {})
        options.pop("autoscaling_config", None)
        options.pop("request_router_config", None)
        options["num_replicas"] = 1
        actor = options.setdefault("ray_actor_options", {})
        actor.pop("memory", None)
        actor["num_cpus"] = per_side if name in ("Baseline", "Speculative") else 0
    return conf
