"""`python -m demo.serve`: the arena on Ray Serve.

    python -m demo.serve                               # one-node cluster on 127.0.0.1, page on :8000
    python -m demo.serve --address 10.0.0.5:6379       # deploy onto a running cluster, then exit
    python -m demo.serve --address 10.0.0.5:6379 --shutdown

With `--address local` (the default) this process starts the cluster and holds it: Ctrl-C
takes the page, the deployments and Ray down. With a cluster's address, the deployment
lives on in the cluster after this command returns.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from ..core.errors import DemoError, run_command


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m demo.serve", description=__doc__.split("\n")[0])
    ap.add_argument("--address", default="local",
                    help="`local` (start a one-node cluster on 127.0.0.1) or HOST:PORT of a running head (`ray start --head`)")
    ap.add_argument("--config", type=Path, help="Serve config (default: serve.yaml at the repository root)")
    ap.add_argument("--host", help="address the page is served on (default: the config's http_options, 127.0.0.1)")
    ap.add_argument("--port", type=int, help="port of the page (default: the config's http_options, 8000)")
    ap.add_argument("--preset", help="preset shown first and loaded by the replicas at start (overrides the config)")
    ap.add_argument("--models", help="path to models.yaml (on every node)")
    ap.add_argument("--cache-dir", help="prepared-model cache (on every node)")
    ap.add_argument("--num-cpus", type=int, help="local cluster: CPUs Ray may hand out (default: all of this machine's)")
    ap.add_argument("--object-store-mb", type=int, default=500, help="local cluster: object store size (default 500)")
    ap.add_argument("--deploy-timeout", type=float, default=600.0,
                    help="seconds to wait for every replica to load its models (default 600)")
    ap.add_argument("--shutdown", action="store_true", help="take the arena down on the cluster at --address and exit")
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(lambda: _serve(args), interrupted="stopped: the arena and the local cluster are down")


def _serve(args) -> int:
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    from . import cluster, config as serve_config

    try:
        import ray  # noqa: F401
        from ray import serve
    except ImportError:
        raise DemoError("Ray Serve is not installed; run `pip install -r requirements-serve.txt`.") from None
    conf = serve_config.load(args.config)
    local = args.address == "local"
    if local and args.config is None:  # serve.yaml's shape, sized for this one machine
        from ..core.settings import cpu_cores

        conf = serve_config.for_one_machine(conf, args.num_cpus or cpu_cores())
    for key in ("preset", "models", "cache_dir"):
        if getattr(args, key) is not None:
            conf.args[key] = getattr(args, key)
    if args.shutdown and local:
        raise DemoError("--shutdown needs --address HOST:PORT; a local cluster ends with Ctrl-C.")
    cluster.start(args.address, num_cpus=args.num_cpus, object_store_mb=args.object_store_mb,
                  runtime_env={} if args.shutdown else (conf.runtime_env or None))  # no code upload to shut down
    try:
        if args.shutdown:
            serve.shutdown()
            print("the arena is down on the cluster", file=sys.stderr)
            return 0
        print(f"[serve] deploying {conf.name!r}: the pipeline replicas load their models first", file=sys.stderr)
        url = cluster.deploy(conf, host=args.host or conf.http_options.get("host", "127.0.0.1"),
                             port=args.port or conf.http_options.get("port", 8000), timeout_s=args.deploy_timeout)
        print(f"[serve] ready: {url}", file=sys.stderr, flush=True)
        if not local:
            print("[serve] it keeps running on the cluster; take it down with "
                  f"`python -m demo.serve --address {args.address} --shutdown`", file=sys.stderr)
            return 0
        while True:  # hold the local cluster until Ctrl-C
            time.sleep(3600)
    finally:
        if local:
            cluster.stop()
        else:
            import ray as _ray

            _ray.shutdown()  # only this driver's connection; the cluster keeps the app


if __name__ == "__main__":
    sys.exit(main())
