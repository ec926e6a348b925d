"""llama.cpp's speculative row (scripts/headline.py) drafts with demo.engine.llamacpp.GgufDraft,
which keeps its cache across calls. What it keeps is decided by kept_prefix, tested here on
token lists: llama-cpp-python is an optional extra that CI does not build, so the drafting
itself runs only where it is installed (BENCHMARKS.md records those runs)."""

from demo.engine.llamacpp import kept_prefix


def test_the_shared_prefix_is_kept_and_the_last_token_is_always_fed_again():
    cache = [5, 6, 7, 8]
    assert kept_prefix(cache, 4, [5, 6, 7, 8, 9, 10]) == 4  # the main accepted more: feed 9, 10
    assert kept_prefix(cache, 4, [5, 6, 7, 8]) == 3         # nothing new: 8 again, for its logits
    assert kept_prefix(cache, 4, [5, 6, 9, 10]) == 2        # a guess was rejected at position 2
    assert kept_prefix(cache, 4, [1, 2]) == 0               # another prompt
    assert kept_prefix([], 0, [1]) == 0


def test_tokens_past_what_the_cache_holds_are_never_kept():
    """The bindings' array runs on past n_tokens with a previous answer's tokens: the same
    prompt answered again matches them, yet the cache no longer holds them (a reset sets
    n_tokens to 0), and keeping them leaves a gap llama.cpp refuses (llama_decode -1)."""
    stale = [5, 6, 7, 8, 9, 10, 11, 0, 0]
    assert kept_prefix(stale, 0, [5, 6, 7, 8, 9]) == 0
    assert kept_prefix(stale, 3, [5, 6, 7, 8, 9]) == 3
