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
