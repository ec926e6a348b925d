"""Race recordings: one finished race as a JSON file that can be replayed anywhere.

A recording holds both streams (three for a three-way race) step by step: each step's
offset from its own side's start, its token ids, its text and the part of it the draft
(or prompt lookup) guessed; plus the settings, the weight formats, the machine, the
library versions and the date. Replaying it (demo.engine.race.replay over playback.to_results) shows
the race at the pace it really had, so a booth can show a race on a laptop whose models
are not prepared yet, and a visitor can take a race home.

Recordings from outside are untrusted: they are read with a size cap, parsed without
NaN/Infinity, validated against a strict schema (pydantic, extra="forbid") whose counts
must agree (a lane's token count is its steps' token ids, offsets never go back in time,
accepted text is a prefix of its step's text), and rendered by the same escaping
renderers as live output. Every problem is one sentence that says what to do.

Pure engine code: no Gradio, no OpenVINO (the versions are asked of demo.core.machine).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Annotated, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..core.errors import DemoError
from ..core.settings import MAX_NEW_TOKENS_LIMIT, MAX_PROMPT_CHARS
from ..core.files import write_atomic

FORMAT = "speculative-arena-recording"
VERSION = 2  # raised when the form grows; older files load as they are (lanes without acceptance curves)
MAX_SECONDS = 900.0             # a replay never runs longer than this
MAX_STEP_TOKENS = 64            # K is at most 32 on the page; a step is K accepted + 1
# Bounded by its token count, so a replay costs what its race did: real text is ~4 characters a
# token (shipped recordings: at most 12 in a step), a real file ~55 bytes a token + 2 KB.
MAX_CHARS_PER_TOKEN = 64        # in one step: the longest tokens are runs of spaces or dashes
MAX_LANE_CHARS = 16 * MAX_NEW_TOKENS_LIMIT
MAX_STEP_CHARS = MAX_CHARS_PER_TOKEN * MAX_STEP_TOKENS
HEADER_BYTES = 128 * 1024       # settings, machine, versions and a 16,000-character prompt, escaped
BYTES_PER_TOKEN = 160           # a one-token step with its id, its text and its time, with room
MAX_LANE_TOKENS = MAX_NEW_TOKENS_LIMIT + MAX_STEP_TOKENS
MAX_BYTES = HEADER_BYTES + BYTES_PER_TOKEN * len(("baseline", "draft", "lookup")) * MAX_LANE_TOKENS  # ~1.1 MB
RECORDINGS_DIR = Path(__file__).resolve().parents[2] / "recordings"

RACE_LANES = ("baseline", "speculative")
THREE_WAY_LANES = ("baseline", "draft", "lookup")
LaneName = Literal["baseline", "speculative", "draft", "lookup"]


class RecordingError(DemoError):
    """A recording that cannot be replayed, with the sentence that says why."""


def _text(n: int):
    return Annotated[str, Field(max_length=n)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Step(_Strict):
    t: float = Field(ge=0, le=MAX_SECONDS, description="seconds from this lane's start to this step's tokens")
    token_ids: list[Annotated[int, Field(ge=0, lt=2**31)]] = Field(min_length=1, max_length=MAX_STEP_TOKENS)
    text: _text(MAX_STEP_CHARS)
    accepted_text: _text(MAX_STEP_CHARS) = ""

    @model_validator(mode="after")
    def _accepted_is_a_prefix(self):
        if not self.text.startswith(self.accepted_text):
            raise ValueError("a step's accepted text must be the start of its text")
        if len(self.text) > MAX_CHARS_PER_TOKEN * len(self.token_ids):
            raise ValueError(f"a step holds {len(self.text):,} characters of text for {len(self.token_ids)} "
                             f"token{'s' if len(self.token_ids) != 1 else ''}, more than tokens ever decode to "
                             f"(at most {MAX_CHARS_PER_TOKEN} each)")
        return self


class Acceptance(_Strict):
    """A lane's acceptance curve by position (demo.core.acceptance), counted from its steps:
    for guess i, the steps that kept every guess before it (`reached`) and the ones that kept
    it too (`kept`); `rate` = kept ÷ reached; the last step counts as censored."""

    k: int = Field(ge=1, le=32)
    reached: list[Annotated[int, Field(ge=0, le=MAX_NEW_TOKENS_LIMIT)]] = Field(max_length=32)
    kept: list[Annotated[int, Field(ge=0, le=MAX_NEW_TOKENS_LIMIT)]] = Field(max_length=32)
    rate: list[Optional[Annotated[float, Field(ge=0, le=1)]]] = Field(max_length=32)
    tokens_per_step: Optional[float] = Field(None, ge=1, le=33)

    @classmethod
    def of(cls, curve) -> "Acceptance":
        d = curve.as_dict()
        return cls(k=d["k"], reached=d["reached"], kept=d["kept"], rate=d["rate"], tokens_per_step=d["tokens_per_step"][-1])


class Lane(_Strict):
    name: LaneName
    seconds: float = Field(ge=0, le=MAX_SECONDS, description="from generate() called to returned")
    tokens: int = Field(ge=0, le=MAX_LANE_TOKENS)
    steps: list[Step] = Field(max_length=MAX_NEW_TOKENS_LIMIT)
    ov_accepted_tokens: Optional[int] = Field(None, ge=0, le=10 * MAX_NEW_TOKENS_LIMIT)
    ov_draft_tokens: Optional[int] = Field(None, ge=0, le=10 * MAX_NEW_TOKENS_LIMIT)
    acceptance: Optional[Acceptance] = None

    @model_validator(mode="after")
    def _consistent(self):
        counted = sum(len(s.token_ids) for s in self.steps)
        if counted != self.tokens:
            raise ValueError(f"the lane says {self.tokens} tokens but its steps hold {counted}")
        chars = sum(len(s.text) for s in self.steps)
        if chars > MAX_LANE_CHARS:
            raise ValueError(f"the lane holds {chars:,} characters of text, more than a race of "
                             f"{MAX_NEW_TOKENS_LIMIT:,} tokens ever makes ({MAX_LANE_CHARS:,})")
        if any(b.t < a.t for a, b in zip(self.steps, self.steps[1:])):
            raise ValueError("the steps' times must never go back")
        if self.steps and self.steps[-1].t > self.seconds + 1e-3:
            raise ValueError("a step comes after the lane's end")
        if self.name == "baseline" and any(s.accepted_text for s in self.steps):
            raise ValueError("the baseline has no draft, so no step of it can have accepted text")
        if (self.ov_accepted_tokens is not None and self.ov_draft_tokens is not None
                and self.ov_accepted_tokens > self.ov_draft_tokens):
            raise ValueError("more draft tokens accepted than drafted")
        if self.acceptance is not None:
            from ..core.acceptance import acceptance_curve

            counted = Acceptance.of(acceptance_curve([len(s.token_ids) for s in self.steps[1:]], self.acceptance.k))
            if self.name == "baseline" or self.acceptance != counted:
                raise ValueError("a lane's acceptance curve must be the one its steps give")
        return self


class Machine(_Strict):
    cpu_model: Optional[_text(200)] = None
    isa_flags: list[Annotated[str, Field(pattern=r"^[a-z0-9_.]{1,32}$")]] = Field(default_factory=list, max_length=64)
    cores: int = Field(ge=1, le=100_000)
    cpu_count: Optional[int] = Field(None, ge=1, le=100_000)
    memory_gb: Optional[float] = Field(None, ge=0, le=1_000_000)
    platform: Optional[_text(200)] = None


class RecordedSettings(_Strict):
    max_new_tokens: int = Field(ge=1, le=MAX_NEW_TOKENS_LIMIT)
    method: Literal["draft", "prompt_lookup"]
    assistant_tokens: Optional[int] = Field(None, ge=1, le=32)
    confidence_threshold: Optional[float] = Field(None, gt=0, lt=1)
    max_ngram_size: int = Field(3, ge=1, le=64)
    sampling: bool = False
    temperature: float = Field(0.7, gt=0, le=2)
    top_p: float = Field(0.9, gt=0, le=1)
    seed: int = Field(42, ge=0, lt=2**63)


class Recording(_Strict):
    format: Literal["speculative-arena-recording"] = FORMAT
    version: Literal[1, 2] = VERSION
    kind: Literal["race", "three-way"]
    recorded_at: _text(40)
    machine: Machine
    versions: dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,40}$")], Optional[_text(80)]] = Field(
        default_factory=dict, max_length=16)
    preset: _text(100)
    main_format: Optional[_text(40)] = None
    draft_format: Optional[_text(40)] = None
    baseline_format: Optional[_text(40)] = None  # the baseline's own main, where it read other weights than main_format
    mode: Literal["race", "fair", "three-way"]
    how: _text(600) = ""
    settings: RecordedSettings
    exact: bool = False
    prompt: _text(MAX_PROMPT_CHARS)
    prompt_class: _text(200)
    lanes: list[Lane] = Field(min_length=2, max_length=3)

    @field_validator("recorded_at")
    @classmethod
    def _a_date(cls, v: str) -> str:
        try:
            datetime.fromisoformat(v)
        except ValueError:
            raise ValueError("recorded_at must be an ISO 8601 date and time") from None
        return v

    @model_validator(mode="after")
    def _lanes_fit_the_kind(self):
        names = tuple(lane.name for lane in self.lanes)
        want = RACE_LANES if self.kind == "race" else THREE_WAY_LANES
        if names != want:
            raise ValueError(f"a {self.kind} recording has the lanes {', '.join(want)}, in that order")
        if (self.kind == "three-way") != (self.mode == "three-way"):
            raise ValueError("the mode must be three-way exactly when the kind is")
        if any(lane.acceptance is not None and lane.acceptance.k != self.settings.assistant_tokens for lane in self.lanes):
            raise ValueError("an acceptance curve has as many positions as the settings' assistant tokens")
        return self

    def lane(self, name: str) -> Lane:
        return next(lane for lane in self.lanes if lane.name == name)


# -- from a finished race ----------------------------------------------------------------

def from_results(results: dict, *, kind: str, mode: str, preset: str, settings, prompt: str, prompt_class: str,
                 how: str = "", exact: bool = False, main_format: Optional[str] = None,
                 draft_format: Optional[str] = None, machine: Optional[dict] = None,
                 versions: Optional[dict] = None, recorded_at: Optional[str] = None,
                 baseline_format: Optional[str] = None) -> Recording:
    """A recording of a finished race: `results` maps lane -> RunResult (demo.core.streaming):
    baseline and speculative for a race, baseline, draft and lookup for a three-way race.
    RecordingError (one sentence) for a race no recording can hold."""
    try:
        return _from_results(results, kind, mode, preset, settings, prompt, prompt_class, how, exact, main_format,
                             draft_format, machine, versions, recorded_at, baseline_format)
    except ValidationError as e:
        raise RecordingError(f"This race cannot be saved as a recording ({_first_problem(e)}).") from None


def _from_results(results, kind, mode, preset, settings, prompt, prompt_class, how, exact, main_format,
                  draft_format, machine, versions, recorded_at, baseline_format) -> Recording:
    from ..core.machine import machine_info, versions as library_versions

    from ..core.acceptance import curve_of_chunks

    lanes = []
    for name in RACE_LANES if kind == "race" else THREE_WAY_LANES:
        r = results[name]
        duration = max(r.end - r.start, 0.0)
        steps = [Step(t=round(min(max(c.t - r.start, 0.0), duration), 6), token_ids=list(c.token_ids),
                      text=c.text, accepted_text=c.accepted_text if name != "baseline" else "")
                 for c in r.chunks]
        curve = None if name == "baseline" else curve_of_chunks(r.chunks, settings.assistant_tokens)
        lanes.append(Lane(name=name, seconds=round(duration, 6), tokens=sum(len(s.token_ids) for s in steps),
                          steps=steps, ov_accepted_tokens=r.ov_accepted_tokens, ov_draft_tokens=r.ov_draft_tokens,
                          acceptance=None if curve is None else Acceptance.of(curve)))
    info = machine if machine is not None else machine_info()
    return Recording(
        kind=kind, recorded_at=recorded_at or datetime.now().astimezone().isoformat(timespec="seconds"),
        machine=Machine(**{k: info.get(k) for k in Machine.model_fields if k in info}),
        versions={k: (str(v) if v is not None else None) for k, v in
                  (versions if versions is not None else library_versions()).items()},
        preset=preset, main_format=main_format, draft_format=draft_format, baseline_format=baseline_format,
        mode=mode, how=how[:600],
        settings=RecordedSettings(**{k: getattr(settings, k) for k in RecordedSettings.model_fields}),
        exact=exact, prompt=prompt, prompt_class=prompt_class, lanes=lanes,
    )


def max_bytes(tokens: int) -> int:
    """The most bytes a recording of this many tokens (all lanes together) may take."""
    return HEADER_BYTES + BYTES_PER_TOKEN * tokens


def dumps(rec: Recording) -> bytes:
    data = rec.model_dump_json().encode("utf-8")
    if len(data) > min(MAX_BYTES, max_bytes(sum(lane.tokens for lane in rec.lanes))):
        raise RecordingError(f"This race makes a {_mb(len(data))} recording, more than one of its length can take "
                             "to be replayed; record a shorter race (fewer new tokens).")
    return data


def save(rec: Recording, path: Path) -> Path:
    return write_atomic(path, dumps(rec))


# -- reading untrusted files --------------------------------------------------------------

WHAT_TO_DO = "choose a .json file saved by this page or by python -m demo.record"


def read_capped(path: Union[str, Path]) -> bytes:
    """A file's bytes, refusing anything over MAX_BYTES before reading it."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise RecordingError(f"This file is {_mb(size)}; recordings up to {_mb(MAX_BYTES)} can be replayed, "
                                 f"so {WHAT_TO_DO}.")
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError:
        raise RecordingError(f"The recording could not be read; upload it again or {WHAT_TO_DO}.") from None
    if len(data) > MAX_BYTES:  # it grew meanwhile
        raise RecordingError(f"This file is over {_mb(MAX_BYTES)}; {WHAT_TO_DO}.")
    return data


def load_bytes(data: bytes) -> Recording:
    """Parse and validate a recording; RecordingError (one sentence) for anything wrong."""
    if len(data) > MAX_BYTES:
        raise RecordingError(f"This file is {_mb(len(data))}; recordings up to {_mb(MAX_BYTES)} can be replayed, "
                             f"so {WHAT_TO_DO}.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise RecordingError(f"This file is not a recording (it is not UTF-8 text); {WHAT_TO_DO}.") from None
    try:
        raw = json.loads(text, parse_constant=_no_constants)
    except json.JSONDecodeError as e:
        raise RecordingError(f"This recording is not valid JSON at line {e.lineno} (it may be cut short); "
                             f"{WHAT_TO_DO}.") from None
    except _Constant:  # NaN or Infinity, which JSON does not have
        raise RecordingError(f"This recording holds NaN or Infinity, which recordings never do; {WHAT_TO_DO}.") from None
    except ValueError:  # an integer of over 4,300 digits (Python's own limit on reading one)
        raise RecordingError(f"This recording holds a number far too long for a recording; {WHAT_TO_DO}.") from None
    except RecursionError:
        raise RecordingError(f"This file is nested too deeply to be a recording; {WHAT_TO_DO}.") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise RecordingError(f"This file is not a speculative-arena recording; {WHAT_TO_DO}.")
    version = raw.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version > VERSION:
        raise RecordingError(f"This recording was made by a newer version of the demo (format {version}); "
                             "update the demo to replay it.")
    try:
        rec = Recording.model_validate(raw)
    except ValidationError as e:
        raise RecordingError(f"This recording does not match the recording format ({_first_problem(e)}); "
                             f"{WHAT_TO_DO}.") from None
    except RecursionError:
        raise RecordingError(f"This recording is nested too deeply to be one; {WHAT_TO_DO}.") from None
    tokens = sum(lane.tokens for lane in rec.lanes)
    if len(data) > max_bytes(tokens):  # padding, or text no race makes: replaying it would cost more than the race
        raise RecordingError(f"This file is {_kb(len(data))} for {tokens:,} tokens, more than a recording of that "
                             f"length takes (at most {_kb(max_bytes(tokens))}); {WHAT_TO_DO}.")
    return rec


def load(path: Union[str, Path]) -> Recording:
    return load_bytes(read_capped(path))


class _Constant(ValueError):
    """NaN, Infinity or -Infinity in the text: JSON has none, Python's parser reads them."""


def _no_constants(name: str):
    raise _Constant(f"{name} is not a number a recording may hold")


def _first_problem(e: ValidationError) -> str:
    """The first validation problem, without echoing anything from the file but its shape:
    keys are shown only if they are plain identifiers (a key may be `<script>`)."""
    err = e.errors(include_url=False, include_input=False)[0]
    loc = list(err.get("loc", ()))
    if err.get("type") == "extra_forbidden":
        loc = loc[:-1]  # the unknown key itself is the file's text: leave it out
    parts = []
    for p in loc:
        if isinstance(p, int):
            parts.append(f"[{p}]")
        elif isinstance(p, str) and p.replace("_", "").isalnum() and p.isascii() and len(p) <= 40:
            parts.append(("." if parts else "") + p)
        else:
            parts.append(("." if parts else "") + "?")
    where = "".join(parts) or "the top level"
    msg = " ".join(str(err.get("msg", "invalid")).split())
    msg = msg.removeprefix("Value error, ")
    if err.get("type") == "extra_forbidden":
        msg = "a field that recordings do not have"
    return f"{where}: {msg[:160]}"


def _mb(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MB"


def _kb(n: int) -> str:
    return f"{n / 1024:,.0f} KB"
