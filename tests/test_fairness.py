"""Fair by construction: both sides get the same scheduler, each constructor only its own
device's properties, and the numbers the page shows are the engine's own.

The constructor spies replace openvino_genai.LLMPipeline / draft_model and fake the device
list (no GPU or NPU here); the expected properties are written out by hand. The TTFT and
page tests run real OpenVINO inference on the SmolLM2 fixture.
"""

import re
from types import SimpleNamespace

import pytest

from demo.core import placement
from demo.core.errors import DemoError
from demo.core.settings import GenerationSettings, PipelineOptions
from demo.core.streaming import BASELINE, SIDES, SPECULATIVE
from demo.engine import arena as arena_module, pipelines, request as request_module
from demo.engine.arena import RaceRequest, how_it_ran, threads_for
from demo.engine.pipelines import PairKey, PipelineCache

# OpenVINO GenAI's own property name (its plain continuous-batching adapter sets it to 1).
SAMPLER = {"sampler_num_threads": 1}
EXACT = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}
# Every CPU constructor computes activations in f32 (the CPU plugin's bf16 default is slower
# for compressed weights); a GPU or NPU constructor gets no such property.
F32 = {"INFERENCE_PRECISION_HINT": "f32"}


class ConstructorSpy:
    """Records what every LLMPipeline and draft_model constructor receives."""

    def __init__(self, monkeypatch, devices=("CPU", "GPU", "NPU"), real=False):
        import openvino_genai

        self.calls = []
        real_pipeline, real_draft = openvino_genai.LLMPipeline, openvino_genai.draft_model

        def pipeline(path, device, **kw):
            role = SPECULATIVE if ("draft_model" in kw or "prompt_lookup" in kw) else BASELINE
            self.calls.append(SimpleNamespace(what="LLMPipeline", role=role, device=device, kw=kw))
            return real_pipeline(path, device, **kw) if real else SimpleNamespace()

        def draft(path, device, **kw):
            self.calls.append(SimpleNamespace(what="draft_model", role="draft", device=device, kw=kw))
            return real_draft(path, device, **kw) if real else SimpleNamespace()

        monkeypatch.setattr(openvino_genai, "LLMPipeline", pipeline)
        monkeypatch.setattr(openvino_genai, "draft_model", draft)
        if not real:
            monkeypatch.setattr(pipelines, "available_devices", lambda: list(devices))

    def properties(self, role: str) -> dict:
        [call] = [c for c in self.calls if c.role == role]
        return {k: v for k, v in call.kw.items() if k not in ("scheduler_config", "draft_model", "prompt_lookup")}

    def schedulers(self) -> list:
        return [c.kw.get("scheduler_config") for c in self.calls if c.what == "LLMPipeline"]


def load(monkeypatch, main_device="CPU", draft_device="CPU", exact=False, cores=4, method="draft",
         baseline_attention="PA"):
    """What a race request's constructors get, through the arena's own thread split."""
    for module in (arena_module, request_module):  # the split, and the retry after a crash
        monkeypatch.setattr(module, "cpu_cores", lambda: cores)
    options = PipelineOptions(main_device=main_device, draft_device=draft_device, exact=exact,
                              baseline_attention=baseline_attention)
    request = RaceRequest(prompt="x", options=options, settings=GenerationSettings(method=method))
    key = PairKey("main", "draft" if method == "draft" else None, method, options.with_threads(threads_for(request)))
    spy = ConstructorSpy(monkeypatch)
    pipelines._load_pipelines(key, SIDES, lambda m: None)
    return spy


def settings_of(config) -> tuple:
    return (config.cache_size, config.max_num_batched_tokens, config.dynamic_split_fuse, config.enable_prefix_caching)


def test_a_cpu_race_splits_the_cores_and_builds_both_sides_from_equal_schedulers(monkeypatch):
    spy = load(monkeypatch, cores=4)
    cpu = {"INFERENCE_NUM_THREADS": 2, "ENABLE_CPU_PINNING": False, **F32, **SAMPLER}
    assert spy.properties(BASELINE) == cpu
    assert spy.properties(SPECULATIVE) == cpu
    assert spy.properties("draft") == cpu
    base, spec = spy.schedulers()
    assert base is not None and spec is not None, "both sides must get an explicit scheduler"
    assert settings_of(base) == settings_of(spec)
    assert base.enable_prefix_caching is False


def test_how_it_ran_states_what_every_constructor_was_given(monkeypatch):
    """The page's words come from the properties the constructors really received (read
    back from the spies), for every role: f32 activations for main and draft alike."""
    spy = load(monkeypatch, cores=4)
    how = how_it_ran("race", PipelineOptions(), "draft", 2)
    for role, name in ((BASELINE, "main"), (SPECULATIVE, "main"), ("draft", "draft")):
        given = ", ".join(f"{k}={v}" for k, v in sorted(spy.properties(role).items()))
        assert f"{name} on CPU given {given}" in how, (role, how)
    assert "precision main and draft: f32 activations" in how and "default precision" not in how
    # A GPU main gets no precision property: the page says the GPU's default, the CPU draft f32.
    how = how_it_ran("race", PipelineOptions("GPU", "CPU"), "draft", 4)
    assert "precision main: GPU's default precision; draft: f32 activations" in how
    exact = how_it_ran("fair", PipelineOptions(exact=True), "prompt_lookup", None)
    assert "exact mode, precision main: f32 activations, f32 KV cache, no dynamic quantization" in exact


def test_the_three_way_race_and_the_cluster_state_the_same_precision():
    from demo.engine import three_way
    from demo.serve.remote import how_it_ran_on_cluster

    request = RaceRequest(prompt="x")
    assert "precision main and draft: f32 activations" in three_way.how_it_ran(request)
    assert "precision main and draft: f32 activations" in how_it_ran_on_cluster(request, {})


def test_the_cpu_plugin_reports_the_precision_it_was_given(smollm2_ir):
    """Read back from a compiled model (OpenVINO GenAI keeps its pipelines' compiled models to
    itself): the CPU plugin compiles the fixture with the very properties a CPU role gets and
    reports f32, whatever its own default on this CPU."""
    import openvino

    core = openvino.Core()
    props = {k: v for k, v in placement.properties_for("CPU", PipelineOptions(threads=1)).items()}
    compiled = core.compile_model(core.read_model(smollm2_ir / "openvino_model.xml"), "CPU", props)
    assert compiled.get_property("INFERENCE_PRECISION_HINT") == openvino.Type.f32
    assert int(compiled.get_property("INFERENCE_NUM_THREADS")) == 1


def test_a_gpu_draft_gets_no_cpu_properties_and_the_cpu_is_split_between_the_two_mains(monkeypatch):
    spy = load(monkeypatch, draft_device="GPU", cores=4)
    assert spy.properties("draft") == SAMPLER
    assert spy.properties(BASELINE) == spy.properties(SPECULATIVE) == {"INFERENCE_NUM_THREADS": 2,
                                                                       "ENABLE_CPU_PINNING": False, **F32, **SAMPLER}


def test_a_gpu_main_leaves_the_whole_cpu_to_the_draft(monkeypatch):
    spy = load(monkeypatch, main_device="GPU", draft_device="CPU", cores=4)
    assert spy.properties(BASELINE) == spy.properties(SPECULATIVE) == SAMPLER
    assert spy.properties("draft") == {"INFERENCE_NUM_THREADS": 4, "ENABLE_CPU_PINNING": False, **F32, **SAMPLER}
    how = how_it_ran("race", PipelineOptions("GPU", "CPU"), "draft", 4)
    assert "4 threads for the one side on the CPU" in how and "the baseline side runs on GPU and takes no CPU share" in how


def test_an_npu_main_uses_the_stateful_backend_on_both_sides_and_a_prompt_limit(monkeypatch):
    spy = load(monkeypatch, main_device="NPU", draft_device="CPU", cores=4)
    npu = {"MAX_PROMPT_LEN": 1024, "MIN_RESPONSE_LEN": 256}
    assert spy.properties(BASELINE) == spy.properties(SPECULATIVE) == npu
    assert spy.properties("draft") == {"INFERENCE_NUM_THREADS": 4, "ENABLE_CPU_PINNING": False, **F32}
    assert spy.schedulers() == [None, None], "neither stateful side may get a scheduler the other lacks"


def test_an_npu_draft_makes_the_cpu_baseline_stateful_too(monkeypatch):
    spy = load(monkeypatch, main_device="CPU", draft_device="NPU", cores=2)
    cpu = {"INFERENCE_NUM_THREADS": 1, "ENABLE_CPU_PINNING": False, **F32, "ATTENTION_BACKEND": "SDPA"}
    assert spy.properties(BASELINE) == spy.properties(SPECULATIVE) == cpu
    assert spy.properties("draft") == {"MAX_PROMPT_LEN": 1024, "MIN_RESPONSE_LEN": 256}


def test_a_baseline_calibrated_onto_the_stateful_backend_gets_sdpa_and_no_scheduler(monkeypatch):
    spy = load(monkeypatch, cores=2, baseline_attention="SDPA")
    cpu = {"INFERENCE_NUM_THREADS": 1, "ENABLE_CPU_PINNING": False, **F32}
    assert spy.properties(BASELINE) == {**cpu, "ATTENTION_BACKEND": "SDPA"}, "no sampler threads without a scheduler"
    assert spy.properties(SPECULATIVE) == spy.properties("draft") == {**cpu, **SAMPLER}
    baseline, speculative = spy.schedulers()
    assert baseline is None and speculative is not None
    options = PipelineOptions(baseline_attention="SDPA")
    assert "ATTENTION_BACKEND=SDPA" in placement.describe_built_with(options, "draft")
    # The guard proves what is compiled: the baseline's stateful compile under its own key.
    guarded = pipelines.native_configs(PairKey("main", "draft", "draft", options), SIDES)
    assert [(c.folder, c.role, c.attention) for c in guarded] == [
        ("main", "main", "SDPA"), ("main", "main", "PA"), ("draft", "draft", "PA")]
    assert any("stateful backend" in n for n in placement.notes(options, "draft"))
    # Exact mode proves that both sides give the same tokens: one backend for both.
    spy = load(monkeypatch, exact=True, cores=2, baseline_attention="SDPA")
    assert spy.properties(BASELINE) == spy.properties(SPECULATIVE) and None not in spy.schedulers()
    with pytest.raises(DemoError, match="attention backend must be one of PA, SDPA"):
        placement.check_options(PipelineOptions(baseline_attention="flash"))


def test_exact_mode_reaches_both_pipelines_and_the_draft(monkeypatch):
    spy = load(monkeypatch, exact=True, cores=2)
    for role in (BASELINE, SPECULATIVE, "draft"):
        assert spy.properties(role) == {**EXACT, "INFERENCE_NUM_THREADS": 1, "ENABLE_CPU_PINNING": False,
                                        **SAMPLER}, role
    spy = load(monkeypatch, exact=True, draft_device="GPU", cores=2)
    assert spy.properties("draft") == {**EXACT, **SAMPLER}


def test_prompt_lookup_gets_the_same_scheduler_as_its_baseline(monkeypatch):
    spy = load(monkeypatch, method="prompt_lookup", cores=2)
    base, spec = spy.schedulers()
    assert settings_of(base) == settings_of(spec)
    assert spy.properties(BASELINE) == spy.properties(SPECULATIVE)


@pytest.mark.parametrize("options, settings, message", [
    (PipelineOptions("NPU", "CPU", exact=True), GenerationSettings(), "Exact mode needs f32 on every device"),
    (PipelineOptions("CPU", "NPU"), GenerationSettings(assistant_tokens=None, confidence_threshold=0.4),
     "cannot stop on a confidence threshold"),
    (PipelineOptions("NPU", "NPU"), GenerationSettings(method="prompt_lookup"), "Prompt lookup does not run on the NPU"),
])
def test_what_an_npu_cannot_do_is_refused_with_a_sentence(options, settings, message):
    with pytest.raises(DemoError, match=message):
        placement.check_options(options, settings)


def test_the_cpu_accepts_every_property_the_demo_sends_it():
    """Against OpenVINO's own list, so a renamed property fails here, not silently at load."""
    import openvino

    supported = set(openvino.Core().get_property("CPU", "SUPPORTED_PROPERTIES"))
    sent = placement.properties_for("CPU", PipelineOptions(exact=True, threads=1))
    assert set(sent) <= supported, set(sent) - supported


# -- real inference --------------------------------------------------------------------

LONG_PROMPT = ("Summarize the following log in one sentence.\n"
               + "\n".join(f"2026-12-01 12:{i % 60:02d}:00 worker-{i % 7} finished job {i} in {i % 13}.{i % 10} s"
                           for i in range(60)))


def test_a_repeated_long_prompt_gets_no_free_prefill_on_either_side(monkeypatch, smollm2_ir):
    """The repeat's time to first token stays within half of the first warm run on both
    sides (a prefix cache on one side only made it 19x faster there), and both sides were
    built from equal scheduler settings, read back from the objects passed to OpenVINO."""
    spy = ConstructorSpy(monkeypatch, real=True)
    runners = PipelineCache(max_pairs=1).get(smollm2_ir, smollm2_ir, "draft", PipelineOptions())
    base, spec = spy.schedulers()
    assert settings_of(base) == settings_of(spec) and base.enable_prefix_caching is False
    n_prompt = runners[BASELINE].count_tokens(runners[BASELINE].template(LONG_PROMPT))
    assert n_prompt > 600, n_prompt  # long enough that its prefill dominates the first token
    settings = GenerationSettings(max_new_tokens=4, assistant_tokens=3)
    ttft = {side: [runners[side].run(LONG_PROMPT, settings, lambda c: True).ov_ttft_ms for _ in range(3)]
            for side in SIDES}
    for side, (first, *repeats) in ttft.items():
        assert all(r >= 0.5 * first for r in repeats), (side, ttft)
    # The speculative side prefills the prompt twice (main, then the draft: here the same
    # model), so its first token takes about twice the baseline's (0.8: room for this box's drift).
    assert ttft[SPECULATIVE][0] >= 0.8 * ttft[BASELINE][0], ttft


def test_a_stateful_baseline_gets_no_free_prefill_either(monkeypatch, smollm2_ir):
    """The stateful backend keeps its KV cache in the model's state between calls: a repeat of
    the same prompt must still prefill it all (no chat session is open across races)."""
    spy = ConstructorSpy(monkeypatch, real=True)
    runners = PipelineCache(max_pairs=1).get(smollm2_ir, smollm2_ir, "draft", PipelineOptions(baseline_attention="SDPA"))
    assert spy.properties(BASELINE).get("ATTENTION_BACKEND") == "SDPA" and spy.schedulers()[0] is None
    settings = GenerationSettings(max_new_tokens=4, assistant_tokens=3)
    first, *repeats = [runners[BASELINE].run(LONG_PROMPT, settings, lambda c: True).ov_ttft_ms for _ in range(3)]
    assert all(r >= 0.5 * first for r in repeats), (first, repeats)


# -- the page's numbers against the engine's -----------------------------------------

def _number(pattern: str, html: str) -> float:
    match = re.search(pattern, html)
    assert match, (pattern, html)
    return float(match.group(1))


def test_the_page_shows_the_engines_own_numbers(running_app, engine_runs):
    """Speedup, both tok/s, TTFT, token counts and acceptance parsed from the rendered HTML
    equal what the RunResults' timestamps and OpenVINO's own counts give."""
    from gradio_client import Client

    from tests.test_app import final, race_args

    prompt = "Write a Python function that returns the largest of three numbers."
    client = Client(running_app.local_url, verbose=False)
    try:
        job = client.submit(*race_args(prompt=prompt, k=3, max_new_tokens=40), api_name="/race")
        job.result(timeout=300)
        out = final(job)
    finally:
        client.close()
    runs = {r.side: r.result for r in engine_runs if r.prompt == prompt}
    assert set(runs) == set(SIDES)
    expected_tps = {}
    for side in SIDES:
        r, html = runs[side], out[f"{side}_stats"]
        assert int(_number(r'data-tokens="(\d+)"', html)) == r.ov_generated_tokens
        expected_tps[side] = r.ov_generated_tokens / (r.end - r.start)
        assert _number(r'data-tokens-per-s="([\d.]+)"', html) == pytest.approx(expected_tps[side], rel=1e-3)
        assert _number(r"<b>(\d+) ms</b> TTFT", html) == pytest.approx((r.chunks[0].t - r.start) * 1000, abs=0.51)
    summary = out["summary"]
    assert _number(r"([\d.]+)×</span> speedup", summary) == pytest.approx(
        expected_tps[SPECULATIVE] / expected_tps[BASELINE], abs=0.0051)
    spec = runs[SPECULATIVE]
    assert int(_number(r'data-accepted="(\d+)"', summary)) == sum(len(c.token_ids) - 1 for c in spec.chunks)
    assert _number(r"acceptance rate (\d+)%", summary) == pytest.approx(
        100 * spec.ov_accepted_tokens / spec.ov_draft_tokens, abs=0.51)
    assert "prefix caching off" in summary


def test_openvino_does_not_apply_the_chat_template_a_second_time():
    """Both sides get the text template() made (the same for both); OpenVINO's own default is
    to template it again, which would wrap the prompt twice."""
    import openvino_genai

    from demo.engine.openvino_runner import OpenVINORunner

    assert openvino_genai.GenerationConfig().apply_chat_template is True  # the library's default
    for side in SIDES:
        runner = OpenVINORunner.__new__(OpenVINORunner)  # no pipeline: only its generation config
        runner._ov, runner.side = openvino_genai, side
        assert runner._config(GenerationSettings(assistant_tokens=3)).apply_chat_template is False
