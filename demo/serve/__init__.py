"""The arena on a Ray Serve cluster: each pipeline an autoscaled deployment.

    python -m demo.serve                       # a one-node cluster on 127.0.0.1, page on :8000
    python -m demo.serve --address HOST:6379   # deploy onto a running cluster (`ray start --head`)

Layout (each module imports only downward; only `deployments`, `__main__` and, inside its
functions, `cluster` import Ray, so the single-machine app never loads it):

  protocol.py     what travels between the deployments besides the engine's own events
  config.py       serve.yaml: Ray Serve's config file format, read without Ray
  merge.py        fan-in of the two sides' streams (pure asyncio, tested without Ray)
  worker.py       one side's pipeline in a replica: load once, stream one run, stop on cancel
  remote.py       RemoteArena: the engine's front door (demo.engine.backend.Backend) over the cluster
  page.py         the Gradio page mounted on FastAPI, with a session cookie for sticky routing
  deployments.py  the Ray Serve deployments (Baseline, Speculative, Race, Page) and build_app
  cluster.py      start (small, loopback) or join a cluster, deploy with a bound, take it down
  __main__.py     `python -m demo.serve`: start or join a cluster, deploy, serve until Ctrl-C

See docs/SCALE-OUT.md.
"""
