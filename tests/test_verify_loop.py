"""The own verify loop (demo/engine/verify_loop): each drafter against a brute-force reference,
the gate's arithmetic by hand, the sampling rule against the target distribution, and the loop
on real OpenVINO inference with the SmolLM2 fixture: in exact mode its tokens are OpenVINO
GenAI's plain greedy tokens, rejected KV rows are really masked, and the replay's prediction
takes exactly the steps the real loop takes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from demo.bench.free_draft_replay import predict
from demo.core.settings import GenerationSettings
from demo.engine.verify_loop import main_model as main_model_module
from demo.engine.verify_loop.datastore import DatastoreProposer
from demo.engine.verify_loop.gate import MARGIN, Gate, best_proposal
from demo.engine.verify_loop.interfaces import Proposal
from demo.engine.verify_loop.loop import Sampler, VerifyLoop, accept
from demo.engine.verify_loop.ngram import NgramProposer
from demo.engine.verify_loop.recycled import RecycledProposer
from demo.models import code_datastore

EXACT = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}
COPY_PROMPT = ("Rename the variable total to subtotal in this function and show the full result.\n\n"
               "def total_price(items, tax_rate):\n    total = 0\n    for item in items:\n"
               "        total = total + item['price'] * item['quantity']\n    total = total + total * tax_rate\n"
               "    return total\n")
PROMPTS = ["Write a Python function that checks whether a number is prime.", COPY_PROMPT,
           "Repeat this list exactly, one item per line: apple, banana, cherry, date, elderberry, fig."]


# --- drafters, against brute force ---------------------------------------------------------------

def brute_ngram(seq, k, max_n=4, min_n=1):
    """The continuation of the most recent earlier occurrence of the longest matching suffix."""
    for n in range(max_n, min_n - 1, -1):
        if len(seq) <= n:
            continue
        suffix = seq[-n:]
        for end in range(len(seq) - 1, n - 1, -1):  # most recent first, never the suffix itself
            if seq[end - n:end] == suffix:
                return tuple(seq[end:end + k])
    return None


def test_ngram_proposer_matches_brute_force_as_the_sequence_grows():
    rng = np.random.default_rng(1)
    seq = [int(t) for t in rng.integers(0, 6, 40)]
    p = NgramProposer()
    p.start(seq[:5])
    for i in range(5, len(seq)):
        got = p.propose(3)
        want = brute_ngram(seq[:i], 3)
        assert (got.tokens if got else None) == want, i
        p.extend([seq[i]])


def test_ngram_proposer_prefers_the_longest_then_most_recent_match():
    p = NgramProposer()
    p.start([1, 2, 3, 9, 8, 2, 3, 7, 1, 2, 3])
    proposal = p.propose(2)
    # "1 2 3" occurred at the start (followed by 9 8); "2 3" more recently (followed by 7 1):
    # the longer match wins.
    assert proposal.tokens == (9, 8) and proposal.kind == "prompt:long"


def test_recycled_proposer_chains_the_main_models_own_predictions():
    p = RecycledProposer()
    p.start([5, 6])
    assert p.propose(3) is None
    p.observe([6, 7, 8], [7, 8, 9], before=5)   # after 6 the main said 7, after 7 8, after 8 9
    proposal = p.propose(3)
    assert proposal.tokens == (7, 8, 9) and proposal.kind == "recycled:pair"
    p.observe([6], [4], before=1)                # after "1 6" the main said 4: a pair's own entry
    assert p.propose(1).tokens == (7,)           # the sequence ends "5 6": that pair still says 7


def write_sources(folder: Path) -> list[Path]:
    files = []
    for i in range(3):
        path = folder / f"m{i}.py"
        path.write_text(f"import os\n\ndef f{i}(path):\n    return os.path.join(path, 'x{i}')\n" * 5)
        files.append(path)
    return files


def test_datastore_positions_match_a_brute_force_search(tmp_path, smollm2_ir):
    store = code_datastore.build(tmp_path / "cache", Path(smollm2_ir), budget=10_000,
                                 files=write_sources(tmp_path))
    tokens = [int(t) for t in store.tokens]
    for start in (0, 7, 20, len(tokens) - 3):
        window = tokens[start:start + 3]
        brute = [i for i in range(len(tokens) - 2) if tokens[i:i + 3] == window]
        assert sorted(store.positions(window).tolist()) == brute
    # Read back from the cache: the same arrays.
    again = code_datastore.load(code_datastore.folder_for(tmp_path / "cache", Path(smollm2_ir), 10_000))
    assert np.array_equal(again.tokens, store.tokens)


def test_datastore_proposer_follows_the_continuation_most_occurrences_share(tmp_path, smollm2_ir):
    import openvino_genai

    store = code_datastore.build(tmp_path / "cache", Path(smollm2_ir), budget=10_000,
                                 files=write_sources(tmp_path))
    tok = openvino_genai.Tokenizer(str(smollm2_ir))
    ids = tok.encode("def f1(path):\n    return os.path", add_special_tokens=False).input_ids.data[0].tolist()
    p = DatastoreProposer(store)
    p.start(ids)
    proposal = p.propose(4)
    assert proposal is not None and proposal.source == "datastore"
    assert tok.decode(list(proposal.tokens)).startswith(".join(path")


# --- the gate, by hand --------------------------------------------------------------------------

def test_gate_drafts_when_a_wide_verify_is_cheap_and_not_when_it_costs_a_token_each():
    cheap = Gate([0.040, 0.042, 0.044, 0.046])
    for _ in range(20):
        cheap.learn("prompt:3", 3, 3)           # every guess held
    d = cheap.decide("prompt:3", 3)
    p = cheap.acceptance("prompt:3")
    assert d.guesses == 3
    assert d.predicted_tokens == pytest.approx(1 + p + p * p + p ** 3)
    steep = Gate([0.040, 0.080, 0.120, 0.160])  # a verify of m tokens costs m tokens
    for _ in range(20):
        steep.learn("prompt:3", 3, 3)
    assert steep.decide("prompt:3", 3).guesses == 0


def test_gate_learns_geometric_acceptance_and_stops_drafting_a_kind_that_fails():
    g = Gate([0.040, 0.046, 0.050])
    g.learn("recycled:token", 2, 1)   # one held, the second rejected: 1 success in 2 trials
    assert g.acceptance("recycled:token") == pytest.approx((1 + 1) / (2 + 2))
    for _ in range(10):
        g.learn("recycled:token", 1, 0)
    assert g.decide("recycled:token", 2).guesses == 0
    # A draft of 1 at p pays only when (1 + p) / cost(2) beats 1 / cost(1) by the margin.
    g2 = Gate([0.040, 0.046])
    g2.accepted["k"], g2.tried["k"] = 18.0 - 1, 100.0 - 2   # p = 0.18: 1.18/0.046 < 1.03/0.040
    assert g2.decide("k", 1).guesses == 0
    g2.accepted["k"], g2.tried["k"] = 25.0 - 1, 100.0 - 2   # p = 0.25: 1.25/0.046 > 1.03/0.040
    assert (1.25 / 0.046) > MARGIN / 0.040 and g2.decide("k", 1).guesses == 1


def test_best_proposal_picks_the_kind_with_the_better_predicted_rate():
    g = Gate([0.040, 0.041, 0.042])
    g.accepted.update({"a": 9, "b": 1}), g.tried.update({"a": 10, "b": 10})
    chosen, d = best_proposal(g, [Proposal((1, 2), "prompt", "b"), None, Proposal((3, 4), "prompt", "a")])
    assert chosen.kind == "a" and d.guesses == 2


# --- acceptance -----------------------------------------------------------------------------------

def test_greedy_acceptance_keeps_the_agreeing_prefix_and_the_main_models_token():
    rows = np.eye(10, dtype=np.float32)[[3, 4, 5, 6]]   # the main says 3, then 4, 5, 6
    assert accept(rows, (3, 4, 9), Sampler()) == (3, 4, 5)
    assert accept(rows, (3, 4, 5), Sampler()) == (3, 4, 5, 6)
    assert accept(rows, (7, 4, 5), Sampler()) == (3,)


def test_sampled_acceptance_gives_the_main_models_distribution():
    """A guess kept with probability p(x), else a token from p without x: the first token out is
    distributed as p whatever is guessed (Leviathan et al., with a one-hot draft)."""
    p = np.array([0.5, 0.3, 0.15, 0.05])
    logits = np.log(p)[None, :].repeat(2, axis=0)
    sampler = Sampler(temperature=1.0, top_p=1.0, seed=3)
    n = 20000
    counts = np.zeros(4)
    for _ in range(n):
        counts[accept(logits, (1,), sampler)[0]] += 1
    assert np.allclose(counts / n, p, atol=0.015)


# --- the loop on real OpenVINO inference --------------------------------------------------------

@pytest.fixture(scope="module")
def exact_main(smollm2_ir):
    from demo.engine.verify_loop.main_model import StatefulMain

    return StatefulMain(Path(smollm2_ir), EXACT)


@pytest.fixture(scope="module")
def exact_runner(smollm2_ir):
    from demo.engine.verify_loop.runner import OwnLoopRunner

    return OwnLoopRunner(Path(smollm2_ir), EXACT)


@pytest.fixture(scope="module")
def genai_greedy(smollm2_ir, exact_runner):
    """OpenVINO GenAI's own plain greedy answers (stateful SDPA backend, exact properties)."""
    import openvino_genai

    pipe = openvino_genai.LLMPipeline(str(smollm2_ir), "CPU", ATTENTION_BACKEND="SDPA", **EXACT)
    config = openvino_genai.GenerationConfig()
    config.max_new_tokens, config.apply_chat_template = 96, False
    answers = {}
    for prompt in PROMPTS:
        text = pipe.generate([exact_runner.template(prompt)], config).texts[0]
        answers[prompt] = text
    return answers


def test_exact_mode_gives_openvino_genais_plain_greedy_tokens(exact_runner, genai_greedy):
    from demo.engine.verify_loop.runner import default_proposers

    # A gate with cheap wide steps and fixed costs drafts on every prompt whatever the machine's
    # timing, so the equality below is tested on many verified guesses, kept and rejected.
    drafted = accepted = 0
    for prompt in PROMPTS:
        ids = exact_runner.tokenizer.encode(exact_runner.template(prompt)).input_ids.data[0].tolist()
        loop = VerifyLoop(exact_runner.main, default_proposers(), Gate([0.040, 0.041, 0.042, 0.043]),
                          exact_runner.eos_ids, follow_costs=False)
        steps = loop.generate(ids, 96, Sampler(), lambda s: True)
        tokens = [t for s in steps for t in s.tokens]
        assert exact_runner.tokenizer.decode(tokens) == genai_greedy[prompt], prompt
        drafted += sum(len(s.proposed) for s in steps)
        accepted += sum(s.accepted for s in steps)
        # The page's path, with the gate on this machine's own costs: the same text.
        result = exact_runner.run(prompt, GenerationSettings(max_new_tokens=96, method="free_draft"), lambda c: True)
        assert result.error is None and result.text == genai_greedy[prompt], prompt
    assert drafted > 20 and accepted > 5


def test_rejected_rows_are_masked_out_of_the_attention(exact_main):
    prompt = [(7 * i) % 500 + 10 for i in range(60)]
    a = int(np.argmax(exact_main.prefill(prompt)))
    exact_main.verify([a, 100, 200, 300])
    exact_main.keep(1)                    # only `a` holds: three masked rows stay in the state
    assert exact_main.holes == 3
    masked = exact_main.verify([777])[0]
    exact_main.prefill(prompt)
    exact_main.verify([a])
    clean = exact_main.verify([777])[0]
    assert np.abs(masked - clean).max() < 1e-3
    # The mask is what made it right: the same state read with the rows visible differs.
    exact_main.prefill(prompt)
    exact_main.verify([a, 100, 200, 300])
    exact_main.fed = 0                    # forget the cut: the three rows stay visible
    visible = exact_main.verify([777])[0]
    assert np.abs(visible - clean).max() > 1e-2


def test_compacting_the_masked_rows_keeps_the_tokens(exact_runner, genai_greedy, monkeypatch):
    monkeypatch.setattr(main_model_module, "HOLES_COMPACTED", 2)
    result = exact_runner.run(COPY_PROMPT, GenerationSettings(max_new_tokens=96), lambda c: True)
    assert result.text == genai_greedy[COPY_PROMPT]


def test_the_replay_takes_the_steps_the_real_loop_takes(exact_runner, genai_greedy):
    from demo.engine.verify_loop.runner import default_proposers

    prompt = COPY_PROMPT
    ids = exact_runner.tokenizer.encode(exact_runner.template(prompt)).input_ids.data[0].tolist()
    answer = exact_runner.tokenizer.encode(genai_greedy[prompt], add_special_tokens=False).input_ids.data[0].tolist()
    gate = Gate([0.040, 0.042, 0.044, 0.046, 0.050, 0.054, 0.058, 0.062], switch_s=0.004)
    loop = VerifyLoop(exact_runner.main, default_proposers(), gate.carried(1.0), exact_runner.eos_ids,
                      follow_costs=False)
    real = loop.generate(ids, len(answer), Sampler(), lambda s: True)[1:]
    eos = min(exact_runner.eos_ids)
    replay = predict(ids, answer, default_proposers(), gate, 0.0, 0.0, eos)
    assert replay.steps == len(real)
    assert replay.drafting_steps == sum(1 for s in real if s.source) > 0
    assert replay.tokens_from_drafting == sum(len(s.tokens) for s in real if s.source)
    # The predicted time, by hand from the real steps: each width's cost, a switch where it changed.
    widths = [1] + [s.width for s in real]
    by_hand = sum(gate.costs[w - 1] + (0.004 if w != b else 0) for b, w in zip(widths, widths[1:]))
    assert replay.predicted_s == pytest.approx(by_hand)


def test_the_gate_holds_a_width_while_a_change_would_cost_more_than_it_buys():
    # Width 2 steady costs 10 % more than 1; a change costs 6 ms. At p = 0.2 leaving width 1 for
    # 2 gives 1.2 / (0.044 + 0.006) < 1 / 0.040: stay. Once at 2, going back to 1 costs the
    # switch too: 1 / 0.046 < 1.2 / 0.044: stay at 2.
    g = Gate([0.040, 0.044], switch_s=0.006)
    g.accepted["k"], g.tried["k"] = 20.0 - 1, 100.0 - 2   # p = 0.2
    assert g.decide("k", 1).width == 1
    g.width = 2
    d = g.decide("k", 1)
    assert d.width == 2 and d.guesses == 1
    # Without a proposal the step keeps its width, padded, rather than pay the switch.
    assert g.decide(None, 0).width == 2 and g.decide(None, 0).guesses == 0
    g0 = Gate([0.040, 0.044], switch_s=0.0, width=2)
    assert g0.decide(None, 0).width == 1


def test_the_gate_learns_the_switch_cost_from_steps_that_changed_width():
    g = Gate([0.040, 0.044], switch_s=0.0)
    g.timed(2, 0.054)           # after width 1: 10 ms over width 2's steady cost
    assert g.switch_s == pytest.approx(0.001)
    assert g.costs == [0.040, 0.044]
    g.width = 2
    g.timed(2, 0.054)           # steady at 2: the cost follows, the switch does not
    assert g.costs[1] == pytest.approx(0.045) and g.switch_s == pytest.approx(0.001)


def test_a_race_with_free_drafting_runs_through_the_arena(smollm2_ir):
    """The page's path: a fair race of free drafting, its summary naming where guesses came from."""
    import threading

    from demo.core.streaming import BASELINE, SPECULATIVE, DoneEvent
    from demo.engine.arena import Arena, RaceRequest

    arena = Arena.create(None, None)
    request = RaceRequest(prompt=COPY_PROMPT, preset="smollm2-self-draft", mode="fair",
                          settings=GenerationSettings(max_new_tokens=48, method="free_draft", assistant_tokens=4))
    results = {e.side: e.result for e in arena.run(request, threading.Event()) if isinstance(e, DoneEvent)}
    assert results[BASELINE].error is None and results[SPECULATIVE].error is None
    spec = results[SPECULATIVE]
    kept = sum(v[2] for v in spec.guess_sources.values())   # guesses a drafter made that held
    assert kept <= spec.ov_accepted_tokens                   # accepted also counts held padding
    # The chunks the page shows hold the steps: their accepted guesses add up to the loop's count.
    assert sum(c.accepted for c in spec.chunks) == spec.ov_accepted_tokens
    summary = arena.summarize(results, request)
    assert "own loop" in summary.how and "not an OpenVINO GenAI pipeline" in summary.how
    assert summary.why is None
    assert summary.sources.startswith("guesses from" if spec.guess_sources else "no step drafted")
    # The step view: the loop's own record of every step (it crossed the child side's JSON), each
    # step's kept guesses the streamed tokens themselves, its first thrown-away guess not the main's token.
    from demo.engine import steps
    from demo.web.step_view import steps_html

    assert steps.why_not(request.settings, request.options) is None
    report = steps.for_race(arena, request, spec, threading.Event())
    assert report.recorded and len(report.steps) == len(spec.chunks) - 1 and report.differ == 0
    assert sum(s.kept for s in report.steps) == sum(c.accepted for c in spec.chunks[1:])
    for s in report.steps:
        assert s.proposed[:s.kept] == s.tokens[:s.kept]
        if s.kept < len(s.proposed) and not s.last:
            assert s.proposed[s.kept] != s.tokens[s.kept]
    sources = {s.source for s in report.steps}
    assert sources <= {"prompt", "datastore", "recycled", None} and sources - {None} == set(spec.guess_sources)
    page = steps_html(report)
    assert "own verify loop ran them" in page and "were reconstructed after" not in page
    if "prompt" in sources:
        assert "from the prompt and answer" in page


def test_a_step_record_that_disagrees_with_the_run_shows_as_differing():
    from demo.core.streaming import SPECULATIVE, Chunk, RunResult
    from demo.core.errors import DemoError
    from demo.engine import steps

    chunks = [Chunk(SPECULATIVE, (5,), "a", "", 0.0), Chunk(SPECULATIVE, (6, 7, 8), "bcd", "bc", 0.1),
              Chunk(SPECULATIVE, (9,), "e", "", 0.2)]
    run = RunResult(SPECULATIVE, 0.0, 1.0, chunks=chunks,
                    guess_steps=[[[], None, 0], [[6, 7, 1], "prompt", 0], [[3], "recycled", 0]])
    report = steps.recorded(run, lambda ids: {i: str(i) for i in ids})
    assert [s.kept for s in report.steps] == [2, 0] and report.differ == 0   # a true record
    run.guess_steps[1][0] = [6, 1, 1]  # a record that says the second guess was 1: the run kept two
    assert steps.recorded(run, lambda ids: {}).differ == 1
    run.guess_steps = None
    with pytest.raises(DemoError, match="kept no record of its guesses"):
        steps.recorded(run, lambda ids: {})


def datastore_of(tokens) -> code_datastore.Datastore:
    t = np.asarray(tokens, dtype=np.uint32)
    keys = code_datastore.window_keys(t)
    order = np.argsort(keys, kind="stable").astype(np.uint32)
    return code_datastore.Datastore(tokens=t, keys=keys[order], order=order, files=1)


def test_datastore_proposer_takes_the_continuation_most_occurrences_share_and_says_how_sure():
    store = datastore_of([1, 2, 3, 7, 9, 0, 1, 2, 3, 7, 9, 0, 1, 2, 3, 8, 5, 0, 4, 4, 6, 2, 6])
    p = DatastoreProposer(store)
    p.start([5, 1, 2, 3])
    proposal = p.propose(2)
    assert proposal.tokens == (7, 9) and proposal.kind == "datastore:agreed"   # 7 twice, 8 once
    p.start([4, 4, 6])
    assert p.propose(2).tokens == (2, 6) and p.propose(2).kind == "datastore:single"
    p.start([9, 9, 9])
    assert p.propose(2) is None


def test_datastore_windows_whose_hashes_collide_are_not_matches():
    tokens = np.asarray([1, 2, 3, 9, 1, 2, 4, 9, 1, 2, 3, 7], dtype=np.uint32)
    key = code_datastore.window_keys(np.asarray([1, 2, 3], dtype=np.uint32))[0]
    n = len(tokens) - 2
    # Every window given the same hash: a collision everywhere; only the true windows may match.
    store = code_datastore.Datastore(tokens=tokens, keys=np.full(n, key, dtype=np.uint32),
                                     order=np.arange(n, dtype=np.uint32), files=1)
    assert sorted(store.positions([1, 2, 3]).tolist()) == [0, 8]


def test_the_gate_stops_drafting_when_wider_steps_really_fall_short_of_one_token():
    g = Gate([0.040, 0.042], switch_s=0.0)
    g.accepted["k"], g.tried["k"] = 50.0 - 1, 100.0 - 2   # p = 0.5: predicted 1.5 / 0.042, clearly better
    assert g.decide("k", 1).width == 2
    for _ in range(5):                                    # but real wide steps kept 1 token in 80 ms
        g.outcome(2, 1, 0.080)
    assert g.shortfall() == 1.0                           # five are too few to judge
    g.outcome(2, 1, 0.080)
    assert g.shortfall() == pytest.approx((1 / 0.040) / (1 / 0.080))
    assert g.decide("k", 1).width == 1


def test_a_stop_ends_the_own_loop_within_a_step(exact_runner):
    import threading

    stop = threading.Event()
    seen = []

    def on_chunk(chunk):
        seen.append(chunk)
        if len(seen) == 2:
            stop.set()   # a visitor pressed Stop; the page's callback itself still says go on
        return True

    result = exact_runner.run(PROMPTS[0], GenerationSettings(max_new_tokens=96), on_chunk, stop=stop)
    assert result.cancelled and len(result.chunks) == 2
