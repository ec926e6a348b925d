"""scripts/experiments/thread_profile.py's reading of a perf report (BENCHMARKS.md's table of where
the threads' time goes): rooms from sample counts, not from the rounded percentages."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts" / "experiments"))

# `perf report --sort pid,dso,sym --stdio -n -t TAB` as perf 6.1 prints it (lines of a real report,
# counts changed so the expected shares are easy to read; the last two rows round to 0.00 %).
REPORT = "\n".join([
    "# To display the perf.data header info, please use --header/--header-only options.",
    "#",
    "# Overhead\tSamples\tPid:Command\tShared Object\tSymbol",
    " 60.00% \t 6000      \t   5801:python \t[JIT] tid 5801                 \t[.] 0x00007f5831991b13",
    " 20.00% \t 2000      \t   5801:python \tlibopenvino_intel_cpu_plugin.so\t[.] 0x0000000001c576d6",
    " 10.00% \t 1000      \t   5810:python \tlibtbb.so.12                   \t[.] 0x00000000000181fa",
    "  5.00% \t 500       \t   5810:python \t[kernel.kallsyms]              \t[k] __schedule",
    "  4.00% \t 400       \t   5801:python \tlibc.so.6                      \t[.] __memcmp_evex_movbe",
    "  0.99% \t 99        \t   5810:python \t[JIT] tid 5801                 \t[.] 0x00007f5831911b13",
    "  0.00% \t 0         \t   5829:python \tlibopenvino_genai.so.2641      \t[.] ov::genai::Sampler::_greedy_sample",
    "  0.00% \t 1         \t   5810:python \t[JIT] tid 5801                 \t[.] 0x00007f58314d283f",
    "",
])


@pytest.fixture(scope="module")
def thread_profile():
    import thread_profile
    return thread_profile


def test_each_sample_goes_to_its_threads_room_by_count(thread_profile):
    got = thread_profile.rooms(REPORT)
    calling, worker = got["threads"]
    assert calling["thread"] == "5801:python" and calling["share"] == pytest.approx(84.0)
    assert calling["rooms"] == pytest.approx({"kernels": 6000 / 8400, "plugin": 2000 / 8400, "libc": 400 / 8400})
    assert worker["thread"] == "5810:python" and worker["share"] == pytest.approx(16.0)
    # the row printed as 0.00 % still counts its one sample
    assert worker["rooms"] == pytest.approx({"threading": 1500 / 1600, "kernels": 100 / 1600})
    assert got["libraries"]["[JIT]"] == pytest.approx(0.61)
    assert calling["top"][0] == ("[JIT] tid 5801 [.] 0x00007f5831991b13", pytest.approx(6000 / 8400))


def test_llama_cpp_waiting_is_told_from_its_kernels(thread_profile):
    assert thread_profile.room("libggml-cpu.so.0", "[.] ggml_gemv_q4_K_8x8_q8_K") == "kernels"
    assert thread_profile.room("libggml-cpu.so.0", "[.] ggml_graph_compute_thread") == "threading"
    assert thread_profile.room("libgomp.so.1.0.0", "[.] 0x000000000001f7da") == "threading"
