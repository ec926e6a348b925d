"""The arena's own verify loop on OpenVINO Runtime, for drafters OpenVINO GenAI cannot host.

GenAI 2026.4 offers a draft model, prompt lookup (padded to K on every step, never combined
with anything else) and EAGLE-3 heads, and no hook for a user's own candidates. A guess that
costs almost nothing (an n-gram of the prompt or of the answer so far, a datastore of code,
the main model's own earlier predictions) needs a loop that verifies `[last] + chain` in one
infer of the same compiled stateful main the plain baseline runs, keeps the longest prefix
the main model agrees with plus its own next token, and drops the rejected KV rows.

interfaces.py   Proposal and the Proposer protocol (what every drafter implements)
ngram.py        n-grams of the prompt and of the answer so far (most recent match)
datastore.py    n-grams of a datastore of Python sources built once from what is installed
recycled.py     the main model's own earlier next-token predictions, per token (token recycling)
gate.py         draft only when the predicted accepted length pays for the verify on this machine
main_model.py   the compiled stateful main: prefill, verify a chain, drop rejected KV rows
loop.py         the loop itself: propose, gate, verify, accept, stream
runner.py       the loop as a race's speculative side (the engine's Runner)
"""
