"""`python -m lab.soak`, short: ten races in a fresh process, three stopped early.

The full soak (200 races, figures in RELIABILITY.md) takes minutes; this checks that the
command measures what it claims and finds no leak in ten races: resident memory read
from /proc, every race worker thread ended, no scratch folder left under the cache's tmp/.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

from tests.conftest import SMOLLM2

REPO_ROOT = Path(__file__).resolve().parent.parent
MB = 1 << 20


def test_soak_of_ten_races_measures_and_leaks_nothing(tmp_path, session_store, smollm2_ir):
    out = tmp_path / "soak.json"
    done = subprocess.run(
        [sys.executable, "-m", "lab.soak", "--runs", "10", "--preset", SMOLLM2, "--max-new-tokens", "16",
         "--stop-every", "3", "--warmup", "2", "--no-fill-kv", "--max-rss-growth", "50",
         "--cache-dir", str(session_store.cache_dir), "--json", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout
    assert "result: ok" in done.stdout
    r = json.loads(out.read_text())

    assert r["runs"] == 10 and len(r["samples"]) == 10 and r["stopped_runs"] == 3
    for s in r["samples"]:
        assert s["errors"] == {}
        if s["stopped"]:  # stopped after 3 chunks: neither side got to report a finished run
            assert s["chunks"] == 3 and s["tokens"] == {}
        else:
            assert s["tokens"] == {"baseline": 16, "speculative": 16}

    # Resident memory was really measured: the loaded SmolLM2 pair is hundreds of MB.
    rss = r["rss"]
    assert rss["after_warmup_bytes"] > 200 * MB and rss["at_end_bytes"] > 200 * MB
    assert rss["at_start_bytes"] < rss["after_warmup_bytes"]
    expected = 100 * (rss["at_end_bytes"] - rss["after_warmup_bytes"]) / rss["after_warmup_bytes"]
    assert math.isclose(rss["growth_pct"], expected, abs_tol=0.01)
    assert len([s["rss_bytes"] for s in r["samples"] if s["rss_bytes"] > 0]) == 10

    # No thread leaked: every race worker ended, and Python's thread count is what it was.
    assert r["threads"]["workers_alive_at_end"] == []
    assert r["threads"]["python"]["at_end"] == r["threads"]["python"]["after_warmup"]
    assert r["threads"]["native"]["at_end"] == r["threads"]["native"]["after_warmup"]

    # No scratch folder left in the cache's tmp/ (the soak's own: other test processes may
    # be preparing into the shared cache meanwhile), and that private view is gone again.
    assert r["scratch"]["at_end"] == [] and r["scratch"]["left_by_this_run"] == []
    assert not Path(r["scratch"]["folder"]).parent.exists()
    assert (session_store.cache_dir / "models").is_dir()  # the shared models are untouched

    assert r["tok_s_median"]["complete_runs"] == 7
    assert r["tok_s_median"]["baseline"] > 0 and r["tok_s_median"]["speculative"] > 0
    assert all(r["checks"].values()) and r["ok"]
