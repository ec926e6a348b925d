"""`python -m demo.cli`: the seed's speculative_decoding_lm, with the baseline beside it."""

import subprocess
import sys


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "demo.cli", *args], capture_output=True, text=True, timeout=300)


def test_cli_streams_and_prints_both_pipelines_metrics(smollm2_ir):
    out = run_cli(str(smollm2_ir), str(smollm2_ir), "--max-new-tokens", "24", "--num-assistant-tokens", "3",
                  "Write a Python function that reverses a string.")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any(l.startswith("baseline") and "24 tokens" in l for l in lines)
    assert any(l.startswith("speculative") and "24 tokens" in l for l in lines)
    assert "speedup" in lines[-1] and "outputs identical" in lines[-1]


def test_cli_prompt_lookup_needs_no_draft(smollm2_ir):
    out = run_cli(str(smollm2_ir), "--prompt-lookup", "--max-new-tokens", "16", "Repeat: red, green, blue, red, green")
    assert out.returncode == 0, out.stderr
    assert "speedup" in out.stdout


def test_cli_errors_are_one_line(tmp_path, smollm2_ir):
    for args, message in [
        ((str(tmp_path), str(tmp_path), "hi"), "is not an OpenVINO IR folder"),
        ((str(smollm2_ir), str(smollm2_ir), "hi", "--device", "GPU.9"), "device 'GPU.9' is not available"),
        ((str(smollm2_ir), str(smollm2_ir), "   "), "The prompt is empty"),
        (("--preset", "nope", "hi"), "Unknown preset 'nope'"),
    ]:
        out = run_cli(*args)
        assert out.returncode == 1
        assert message in out.stderr and "Traceback" not in out.stderr, out.stderr
    both = run_cli(str(smollm2_ir), str(smollm2_ir), "hi", "--num-assistant-tokens", "3",
                   "--assistant-confidence-threshold", "0.4")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


def test_on_a_preset_the_cli_races_the_calibrated_baseline_and_says_what_each_side_ran(
        tmp_path, session_store, smollm2_ir, capsys):
    """The CLI runs what the page would (issue 59, items 5 and 10): the baseline this machine's
    calibration measured fastest alone, on its attention backend, and its summary names each
    side's weights, backend, threads and K."""
    from demo import cli
    from demo.core.settings import cpu_cores

    from .calibrations import auto_fixture_presets, saved

    presets = auto_fixture_presets(tmp_path, "smollm2-auto-cli")
    preset = presets.get("smollm2-auto-cli")
    saved(preset, session_store, {"fair": ("gguf", "gguf", 3), "race": ("gguf", "gguf", 3)},
          baseline={"fair": {"main_format": "int8", "baseline_tok_s": 50.0, "attention": "SDPA"}})
    rc = cli.main(["--preset", preset.name, "--models", str(tmp_path / "models.yaml"), "--cache-dir",
                   str(session_store.cache_dir), "--max-new-tokens", "8", "Write a Python function that adds two numbers."])
    out = capsys.readouterr().out
    assert rc == 0, out
    threads = f"OpenVINO's default threads ({cpu_cores()} cores)"
    assert f"baseline     ran main int8, stateful (SDPA), {threads}" in out.splitlines()
    assert f"speculative  ran main gguf + draft gguf, K=3, paged attention, {threads}" in out.splitlines()


def test_each_side_s_configuration_in_words():
    from demo.core.settings import PipelineOptions
    from demo.engine.request import side_configs

    sdpa = PipelineOptions(threads=1).with_baseline_attention("SDPA")
    formats = {"main": "int4_sym", "draft": "int4_sym", "baseline": "int4_channel"}
    assert side_configs(formats, sdpa, "draft", 4) == {
        "baseline": "main int4_channel, stateful (SDPA), 1 thread",
        "speculative": "main int4_sym + draft int4_sym, K=4, paged attention, 1 thread"}
    # Exact mode keeps both sides on paged attention whatever calibration chose; one main on both.
    exact = PipelineOptions(exact=True, threads=2).with_baseline_attention("SDPA")
    assert side_configs({"main": "f16", "draft": "f16"}, exact, "draft", None, 0.4) == {
        "baseline": "main f16, paged attention, 2 threads",
        "speculative": "main f16 + draft f16, drafting until less sure than 0.4, paged attention, 2 threads"}
