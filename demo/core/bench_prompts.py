"""The benchmark's built-in prompts, in three classes that stress speculative decoding differently.

* code: write or complete code. Drafts guess well (syntax, names repeat), prompt lookup less so.
* chat: free-form explanations. The hardest class for any guesser.
* summarize: copy-heavy. The prompt holds a paragraph or some code, and the answer repeats
  much of it (summarize, rewrite, repeat with small edits): where prompt lookup shines.

Plain strings: the pipelines apply each model's chat template.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import DemoError

CLASSES = ("code", "chat", "summarize")


@dataclass(frozen=True)
class BenchPrompt:
    id: str      # stable name for the JSON ("code-1")
    cls: str     # one of CLASSES
    text: str


_CODE = [
    "Write a Python function that checks whether a string is a palindrome, ignoring case and "
    "punctuation. Include a docstring and two doctests.",
    "Implement binary search in Python as a function `binary_search(items, target)` that returns "
    "the index of target or -1, and explain its time complexity in one sentence.",
    "Complete this Python class so that it works as a fixed-size LRU cache:\n\n"
    "```python\nfrom collections import OrderedDict\n\n\nclass LRUCache:\n"
    "    def __init__(self, capacity: int):\n        self.capacity = capacity\n"
    "        self.items = OrderedDict()\n\n    def get(self, key):\n        # TODO\n\n"
    "    def put(self, key, value):\n        # TODO\n```",
    "Write a SQL query that returns the ten customers with the highest total order value, given "
    "tables customers(id, name) and orders(id, customer_id, amount).",
    "Write a Python function `word_counts(path)` that reads a text file and returns a dict mapping "
    "each lower-cased word to how often it occurs, then print the five most common words.",
]

_CHAT = [
    "Explain what a Python list comprehension is and give three short examples.",
    "Explain the difference between a process and a thread to a new programmer.",
    "Why is the sky blue? Answer in one short paragraph.",
    "What are the advantages and disadvantages of electric cars compared with petrol cars?",
    "Explain speculative decoding for large language models to a high-school student.",
]

_PARAGRAPH = (
    "The city council met on Tuesday evening to discuss the new bicycle lanes on Main Street. "
    "Supporters said the lanes had made the street safer for children riding to school and had "
    "brought more customers to the small shops along the route. Opponents argued that the lanes "
    "had removed forty parking spaces and that delivery trucks now block traffic every morning. "
    "After two hours of debate the council voted five to two to keep the lanes, and asked the "
    "transport office to find new loading zones for delivery trucks before the end of the year."
)

_FUNCTION = (
    "def total_price(items, tax_rate):\n"
    "    total = 0\n"
    "    for item in items:\n"
    "        if item['quantity'] > 0:\n"
    "            total = total + item['price'] * item['quantity']\n"
    "    total = total + total * tax_rate\n"
    "    return total\n"
)

_SUMMARIZE = [
    f"Summarize the following paragraph in two sentences, reusing its wording where you can.\n\n{_PARAGRAPH}",
    f"Repeat the following paragraph exactly, but replace 'Tuesday' with 'Wednesday' and 'forty' "
    f"with 'thirty'.\n\n{_PARAGRAPH}",
    f"Rewrite this Python function with type hints and a docstring; keep the body unchanged.\n\n"
    f"```python\n{_FUNCTION}```",
    f"Rename the variable `total` to `subtotal` everywhere in this function and show the full "
    f"result.\n\n```python\n{_FUNCTION}```",
    "Repeat this list in upper case, one item per line: apple, banana, cherry, date, elderberry, "
    "fig, grape, honeydew, kiwi, lemon, mango, nectarine.",
]

PROMPTS: tuple[BenchPrompt, ...] = tuple(
    BenchPrompt(f"{cls}-{i}", cls, text)
    for cls, texts in (("code", _CODE), ("chat", _CHAT), ("summarize", _SUMMARIZE))
    for i, text in enumerate(texts, 1)
)


def select(classes=None, limit: int | None = None) -> list[BenchPrompt]:
    """Prompts of the given classes (default: all), the first `limit` of each, class by class."""
    classes = list(classes) if classes else list(CLASSES)
    unknown = [c for c in classes if c not in CLASSES]
    if unknown:
        raise DemoError(f"Unknown prompt class {unknown[0]!r}; choose from: {', '.join(CLASSES)}.")
    if limit is not None and limit < 1:
        raise DemoError("The number of prompts per class must be at least 1 (--limit-prompts).")
    chosen: list[BenchPrompt] = []
    for cls in dict.fromkeys(classes):  # keep the order given, drop repeats
        of_class = [p for p in PROMPTS if p.cls == cls]
        chosen.extend(of_class[:limit] if limit else of_class)
    return chosen


# Named sets that never meet (issue 59): calibration chooses formats and K on its prompts, so a
# figure measured on them would flatter its own choice (26 of 30 recorded five-prompt runs read
# code-1 and code-2 higher than code-3…5). Headline figures come from the held-out set only.
CALIBRATION_SET = ("code-1", "code-2")
HEADLINE_SET = ("code-3", "code-4", "code-5")


def named(ids) -> list[BenchPrompt]:
    """The prompts of a named set, in its order."""
    by_id = {p.id: p for p in PROMPTS}
    unknown = [i for i in ids if i not in by_id]
    if unknown:
        raise DemoError(f"Unknown prompt {unknown[0]!r}; choose from: {', '.join(by_id)}.")
    return [by_id[i] for i in ids]


def held_out(prompts) -> list[BenchPrompt]:
    """`prompts`, refused if any is one calibration tunes on (a headline reports only held-out prompts)."""
    seen = [p.id for p in prompts if p.id in CALIBRATION_SET]
    if seen:
        raise DemoError(f"{seen[0]} is one of calibration's prompts ({', '.join(CALIBRATION_SET)}), so a figure measured "
                        f"on it flatters calibration's choice; use the held-out prompts ({', '.join(HEADLINE_SET)}).")
    return list(prompts)
