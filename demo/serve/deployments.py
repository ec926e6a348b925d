"""The arena as Ray Serve deployments (this module imports Ray; nothing outside demo.serve does).

    Page (ingress: the Gradio page on FastAPI)
      └─ Race (fans one request out to both sides, merges their streams)
           ├─ Baseline     (the main model alone)        max_ongoing_requests=batch_requests, autoscaled
           └─ Speculative  (main + draft, or lookup)     max_ongoing_requests=batch_requests, autoscaled

Each pipeline replica loads its side's pipeline once (the default preset at start, others
when first asked, a few kept), runs one generate() at a time (batch_requests 1) or batches
the runs it holds in one continuous-batching pipeline (demo.engine.batched_runner), with OpenVINO's
INFERENCE_NUM_THREADS set to the CPUs Ray gave it (`num_cpus` alone only reserves them),
and says where it runs in every result. Resources, replicas and autoscaling come from
serve.yaml (or `build_app`'s defaults, which fit one small machine).
"""

from __future__ import annotations

import os
from typing import Optional

from ray import serve

from ..core.streaming import BASELINE, SPECULATIVE

APP_NAME = "arena"

# Set in every replica: nothing on the page needs the outside world, and OpenVINO must not
# spread over more cores than Ray reserved (Ray sets OMP_NUM_THREADS for the same reason).
QUIET_ENV = {"GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_OFFLINE": "1",
             "RAY_USAGE_STATS_ENABLED": "0"}


def _quiet() -> None:
    for k, v in QUIET_ENV.items():
        os.environ.setdefault(k, v)


def assigned_cpus() -> Optional[int]:
    """Whole CPUs Ray reserved for this replica (None when it reserved none)."""
    import ray

    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
    return max(1, int(cpus)) if cpus else None


@serve.deployment(max_ongoing_requests=1, ray_actor_options={"num_cpus": 1})
class Pipeline:
    """One side (baseline or speculative) of the race; deployed twice, as Baseline and
    Speculative. `threads`: OpenVINO threads (default: the CPUs Ray reserved, else 1)."""

    def __init__(self, side: str, preset: Optional[str] = None, models: Optional[str] = None,
                 cache_dir: Optional[str] = None, allow_downloads: bool = False, max_pipelines: Optional[int] = None,
                 threads: Optional[int] = None, warm: bool = True, memory_budget_gb: Optional[float] = None,
                 batch_requests: int = 1, crossover: Optional[int] = None):
        _quiet()
        import ray

        from ..engine import child_side
        from ..engine.arena import Arena, RaceRequest
        from .protocol import placement
        from .worker import SideCache, SideWorker

        if side not in (BASELINE, SPECULATIVE):
            raise ValueError(f"side must be {BASELINE!r} or {SPECULATIVE!r}, not {side!r}")
        self.side = side
        self.threads = threads or assigned_cpus() or 1
        self.arena = Arena.create(models, cache_dir, allow_downloads=allow_downloads)
        if preset is not None:
            self.arena.presets.get(preset)
            self.arena.presets = self.arena.presets.model_copy(update={"default": preset})
        # Bytes, as the single-machine app: the operator's figure, else this machine's (or container's) limit.
        budget = int(memory_budget_gb * (1 << 30)) if memory_budget_gb else None
        # batch_requests > 1: the runs Ray hands this replica at once share one continuous-batching
        # pipeline; a speculative one steps aside from drafting at `crossover` running requests (a
        # stand-in) or at the crossover this machine measured for the preset (demo.bench.load).
        self.crossover = crossover
        self._crossovers: dict = {}  # main model folder -> the crossover its pipeline is built with
        # One run at a time: each side in a child process of its own, as `python app.py` runs them,
        # so a Stop (Ray cancels the request) ends a side still reading its prompt within its grace,
        # and the replica's CPU is free when Ray counts the replica free (demo.engine.child_side).
        builder = self._build_batched if batch_requests > 1 else child_side.build_child_side
        self.cache = SideCache(side, budget=budget, max_runners=max_pipelines, side_builder=builder,
                               guard=self.arena.guard)
        self.ran_on = placement(ray.get_runtime_context().get_node_id(), self.threads)
        self.worker = SideWorker(side, self._load, self.ran_on)
        if warm:  # load (and warm up) the default pair's side now, not in the first race
            self._load(RaceRequest(prompt="warm-up", preset=self.arena.presets.default), lambda m: None)

    def _load(self, request, status):
        from ..core.errors import DemoError
        from .worker import side_key

        pair = self.arena.prepare(request.preset, status, main_format=request.main_format,
                                  draft_format=request.draft_format)
        method = request.settings.method
        if self.side == SPECULATIVE and method == "draft" and pair.draft is None:
            raise DemoError("This preset has no draft model; choose prompt lookup as the speculative method.")
        options = request.options.with_threads(self.threads)
        if self.side == SPECULATIVE:
            self._crossovers[str(pair.main)] = self._crossover_for(request.preset)
        return self.cache.get(side_key(self.side, pair.main, pair.draft, method, options), status)

    def _crossover_for(self, preset_name) -> Optional[int]:
        from ..models import load_store

        if self.crossover is not None:
            return self.crossover
        record = load_store.load(self.arena.store, self.arena.presets.get(preset_name))
        return record.crossover if record is not None else None

    def _build_batched(self, key, side, status):
        from ..engine.batched_runner import build_batched_side

        return build_batched_side(key, side, status, crossover=self._crossovers.get(key.main))

    async def run(self, request):
        async for event in self.worker.run(request):
            yield event

    def devices(self) -> list:
        from ..engine.pipelines import available_devices

        return available_devices()

    def where(self) -> str:
        return self.ran_on

    def recent_runs(self) -> list:
        return self.worker.recent_runs()


@serve.deployment(max_ongoing_requests=64, ray_actor_options={"num_cpus": 0})
class Race:
    """Fans a race out to a Baseline and a Speculative replica and merges their streams."""

    def __init__(self, baseline, speculative):
        _quiet()
        self.handles = {BASELINE: baseline, SPECULATIVE: speculative}

    async def run(self, request):
        from .merge import race_streams

        def open_side(side: str):
            return self.handles[side].options(stream=True).run.remote(request)

        async for event in race_streams(open_side, request.mode):
            yield event

    async def devices(self) -> list:
        return await self.handles[SPECULATIVE].devices.remote()


@serve.deployment(max_ongoing_requests=256, ray_actor_options={"num_cpus": 0})
@serve.ingress()
class Page:
    """The Gradio page (the ingress). Its Arena is a RemoteArena over the Race deployment."""

    async def __init__(self, race, preset: Optional[str] = None, models: Optional[str] = None,
                       cache_dir: Optional[str] = None, allow_downloads: bool = False, kiosk: bool = False,
                       idle_seconds: float = 45.0, keep_prompts: bool = False, trust_forwarded_for: bool = False,
                       visitors_per_address: int = 1):
        _quiet()
        from .page import build_page
        from .remote import RemoteArena

        devices = await race.devices.remote()  # waits until a Speculative replica is up
        self.arena = RemoteArena.connect(race, devices, models, cache_dir, allow_downloads=allow_downloads)
        if preset is not None:
            self.arena.presets.get(preset)
            self.arena.presets = self.arena.presets.model_copy(update={"default": preset})
        self.demo = build_page(self.arena, kiosk=kiosk, idle_seconds=idle_seconds, keep_prompts=keep_prompts,
                               trust_forwarded_for=trust_forwarded_for, visitors_per_address=visitors_per_address)

    def __serve_build_asgi_app__(self):
        from .page import build_asgi

        return build_asgi(self.demo)


DEPLOYMENTS = {"Baseline": Pipeline, "Speculative": Pipeline, "Race": Race, "Page": Page}


def build_app(args: Optional[dict] = None, deployments: Optional[dict] = None):
    """The application: `args` (serve.yaml's `args`: preset, models, cache_dir, allow_downloads,
    memory_budget_gb, max_pipelines, kiosk, idle_seconds, keep_prompts, trust_forwarded_for,
    visitors_per_address);
    `deployments` maps a deployment's name to its options (serve.yaml's `deployments`, for
    `python -m demo.serve`; `serve run serve.yaml` applies them itself)."""
    args = dict(args or {})
    deployments = deployments or {}
    common = {k: args.get(k) for k in ("preset", "models", "cache_dir")}
    common["allow_downloads"] = bool(args.get("allow_downloads", False))

    def options(name: str) -> dict:
        return {"name": name, **{k: v for k, v in deployments.get(name, {}).items() if k != "name"}}

    pipeline_args = dict(common, max_pipelines=int(args["max_pipelines"]) if args.get("max_pipelines") else None,
                         memory_budget_gb=float(args["memory_budget_gb"]) if args.get("memory_budget_gb") else None,
                         batch_requests=int(args.get("batch_requests") or 1),
                         crossover=int(args["crossover"]) if args.get("crossover") else None)
    baseline = Pipeline.options(**options("Baseline")).bind(BASELINE, **pipeline_args)
    speculative = Pipeline.options(**options("Speculative")).bind(SPECULATIVE, **pipeline_args)
    race = Race.options(**options("Race")).bind(baseline, speculative)
    page_args = dict(common, kiosk=bool(args.get("kiosk", False)),
                     idle_seconds=float(args.get("idle_seconds", 45.0)),
                     keep_prompts=bool(args.get("keep_prompts", False)),
                     trust_forwarded_for=bool(args.get("trust_forwarded_for", False)),
                     visitors_per_address=int(args.get("visitors_per_address") or 1))
    return Page.options(**options("Page")).bind(race, **page_args)


def app_builder(args: dict):
    """serve.yaml's `import_path` (Ray calls a builder with exactly one argument: `args`)."""
    return build_app(args)
