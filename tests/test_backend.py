"""One protocol for the engine's front door (demo.engine.backend.Backend): the page uses nothing
of an arena that the protocol does not list, and both Arena and the cluster's RemoteArena
provide all of it, RemoteArena without inheriting Arena's methods to switch them off."""

import ast
from pathlib import Path

import pytest

from demo.core.errors import DemoError
from demo.engine.arena import Arena, RaceRequest
from demo.engine.backend import Backend
from demo.serve.remote import ONLY_ONE_MACHINE, RemoteArena

REPO = Path(__file__).resolve().parents[1]
# Everything handed the page's arena: the page, the app, the cluster's page, and the engine
# and records functions the page calls with it.
USERS = (sorted((REPO / "demo" / "web").glob("*.py"))
         + [REPO / "app.py", REPO / "demo" / "serve" / "page.py", REPO / "demo" / "engine" / "chat.py",
            REPO / "demo" / "engine" / "three_way.py", REPO / "demo" / "engine" / "steps.py",
            REPO / "demo" / "records" / "outcomes.py"])


def members() -> set:
    names = set(Backend.__annotations__)
    names |= {n for n, v in vars(Backend).items() if callable(v) and not n.startswith("_")}
    return names


def used_of_arena(path: Path) -> set:
    """Attributes read from a name `arena` (or `self.arena`) in a module."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute):
            owner = node.value
            if (isinstance(owner, ast.Name) and owner.id == "arena") or \
                    (isinstance(owner, ast.Attribute) and owner.attr == "arena"):
                out.add(node.attr)
    return out


def test_the_protocol_lists_everything_the_page_uses_of_an_arena():
    used = {}
    for path in USERS:
        for name in used_of_arena(path):
            used.setdefault(name, []).append(path.relative_to(REPO).as_posix())
    assert used, "the walk found no use of an arena: it is not looking where the page is"
    missing = {name: where for name, where in used.items() if name not in members()}
    assert not missing, f"used of an arena but not in demo.engine.backend.Backend: {missing}"


@pytest.fixture
def both(presets, tmp_path):
    from demo.models.sources import ModelStore

    store = ModelStore(tmp_path)
    return [Arena(presets, store), RemoteArena(presets, store, race=object(), devices=["CPU"])]


def test_arena_and_remote_arena_both_implement_the_whole_protocol(both):
    for arena in both:
        assert isinstance(arena, Backend)
        missing = [name for name in members() if not hasattr(arena, name)]
        assert not missing, f"{type(arena).__name__} lacks {missing}"


def test_remote_arena_is_its_own_class_and_says_what_the_cluster_cannot_do(both):
    assert not issubclass(RemoteArena, Arena)  # composition: no parent method left to switch off
    remote = both[1]
    request = RaceRequest(prompt="hi")
    for attempt in (lambda: remote.prepare(None), lambda: remote.runners(request),
                    lambda: remote.cache.get("main", None, "draft", None)):
        with pytest.raises(DemoError) as refused:
            attempt()
        assert str(refused.value) == ONLY_ONE_MACHINE
    assert remote.prepared(request) is None  # the step view then says it needs the single-machine app
    assert remote.start_background_warmup() is None


def test_the_cluster_page_builds_over_a_remote_arena(both):
    """The page over the cluster's Backend (as demo.serve.page builds it): every part of the
    page that reads the arena while it is built finds what it reads."""
    from demo.serve.page import build_page

    page = build_page(both[1])
    ids = {getattr(block, "elem_id", None) for block in page.blocks.values()}
    assert {"prompt", "run", "baseline-output", "speculative-output"} <= ids
    assert "bench-run" not in ids  # the Benchmark tab measures one machine, not a cluster
