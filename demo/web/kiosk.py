"""Kiosk mode (`python app.py --kiosk --idle-seconds N`): large type and an attract loop.

The loop lives in the browser, in a small script the page runs on load: after N idle
seconds it puts the preset's next example in the prompt and clicks Run, a real race
through the same button, queue and Stop as a visitor's. So a kiosk with no tab open runs
nothing, and the server needs no timer of its own.

Any visitor input (a key, a touch, a click: `isTrusted` events only, never the loop's own
clicks) takes over at once: a demo race still running is stopped, a click on Run starts
the visitor's race as soon as that stop went through, and a tap in the prompt clears the
example the loop typed. The idle clock restarts at every input and whenever a race ends,
and the loop waits while any race runs.

One loop per kiosk, not per tab: every tab renews a lease on the server each second, and
only the tab holding it runs the loop. A free lease goes only to a tab that shows the Race
tab, so a second screen left on the Scoreboard is never pulled back to the race; a tab that
stops renewing (closed, asleep) frees it after LEASE_S.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Callable, Optional

import gradio as gr

LEASE_S = 5.0       # a holder that stopped renewing gives the loop up after this
RENEW_S = 1.0       # each tab renews (or asks for) the lease this often

SCRIPT = """
() => {
  if (window.__kiosk) return;
  const IDLE_MS = %(idle_ms)d;
  const EXAMPLES = %(examples)s;
  const $ = (s) => document.querySelector(s);
  const k = window.__kiosk = {runs: 0, next: 0, last: Date.now(), attract: false, attractSince: 0,
                              prompt: null, takeovers: 0, rerun: false, lease: false};
  document.documentElement.classList.add('kiosk-mode');

  // A race is in flight while Gradio shows its progress on the race's outputs.
  const busy = () => !!document.querySelector(
    ['#baseline-output', '#speculative-output', '#status'].map(
      (id) => `${id} .wrap.generating, ${id} .wrap.pending`).join(', '));
  const touch = () => { k.last = Date.now(); };
  const whenIdle = (then, tries = 60) => {
    if (!busy() || tries <= 0) then(); else setTimeout(() => whenIdle(then, tries - 1), 50);
  };
  const setPrompt = (text) => {
    const ta = $('#prompt textarea');
    if (!ta) return false;
    ta.value = text;
    ta.dispatchEvent(new Event('input', {bubbles: true}));
    return true;
  };

  const takeOver = (e) => {
    if (!e.isTrusted) return;  // the loop's own clicks
    touch();
    const inPrompt = e.target.closest && e.target.closest('#prompt');
    if (k.attract) {
      k.attract = false;
      k.takeovers += 1;
      $('#stop')?.click();
      if (e.type === 'pointerdown' && e.target.closest && e.target.closest('#run')) k.rerun = true;
    }
    // The visitor starts typing: the example the loop typed goes away.
    if (inPrompt && k.prompt !== null && $('#prompt textarea')?.value === k.prompt) setPrompt('');
    k.prompt = null;
  };
  for (const type of ['pointerdown', 'keydown', 'touchstart']) document.addEventListener(type, takeOver, true);
  for (const type of ['wheel', 'pointermove']) document.addEventListener(type, (e) => { if (e.isTrusted) touch(); }, true);
  // A click on Run that stopped a demo race: start the visitor's race once the stop went through.
  document.addEventListener('click', (e) => {
    if (!e.isTrusted || !k.rerun || !(e.target.closest && e.target.closest('#run'))) return;
    k.rerun = false;
    e.preventDefault();
    e.stopImmediatePropagation();
    whenIdle(() => $('#run')?.click());
  }, true);

  setInterval(() => {
    // Tell the server which tab this one shows; run the loop only while holding the lease.
    const raceTab = [...document.querySelectorAll('button[role=tab]')].find((b) => b.textContent.trim() === 'Race');
    const shows = !raceTab || raceTab.getAttribute('aria-selected') === 'true' ? 'race' : 'other';
    const tab = $('#kiosk-tab textarea');
    if (tab && tab.value !== shows) { tab.value = shows; tab.dispatchEvent(new Event('input', {bubbles: true})); }
    k.lease = $('#kiosk-lease textarea')?.value === 'held';
    if (!k.lease) { touch(); return; }  // another tab runs the loop
    if (busy()) { touch(); return; }  // anyone's race: wait for it to end
    if (k.attract && Date.now() - k.attractSince > 2000) k.attract = false;  // it ended by itself
    if (Date.now() - k.last < IDLE_MS || !EXAMPLES.length) return;
    if (raceTab && raceTab.getAttribute('aria-selected') !== 'true') { raceTab.click(); return; }
    const text = EXAMPLES[k.next %% EXAMPLES.length];
    if (!setPrompt(text) || !$('#run')) return;
    k.next += 1;
    k.runs += 1;
    k.prompt = text;
    k.attract = true;
    k.attractSince = Date.now();
    touch();
    setTimeout(() => $('#run')?.click(), 50);
  }, 250);
}
"""


def script(examples: list, idle_seconds: float) -> str:
    return SCRIPT % {"idle_ms": int(idle_seconds * 1000), "examples": json.dumps(list(examples))}


class AttractLease:
    """Which one tab (a Gradio session) runs the attract loop; renewed by that tab's ticks."""

    def __init__(self, ttl_s: float = LEASE_S, clock: Callable[[], float] = time.monotonic):
        self.ttl_s, self.clock = ttl_s, clock
        self._lock = threading.Lock()
        self._holder: Optional[str] = None
        self._until = 0.0

    def renew(self, session: str, shows_race: bool) -> bool:
        """Whether `session` holds the lease now: kept while renewed, and taken when free
        (or expired) only by a tab that shows the Race tab."""
        with self._lock:
            now = self.clock()
            if session != self._holder and (not shows_race or (self._holder is not None and now < self._until)):
                return False
            self._holder, self._until = session, now + self.ttl_s
            return True


def install(demo: gr.Blocks, examples: list, idle_seconds: float, lease: Optional[AttractLease] = None) -> None:
    """Run the kiosk script when the page loads, and renew the attract loop's lease from
    every tab (inside `with demo:`)."""
    lease = lease or AttractLease()
    shows = gr.Textbox("race", visible="hidden", elem_id="kiosk-tab")
    held = gr.Textbox("", visible="hidden", elem_id="kiosk-lease")
    ticker = gr.Timer(RENEW_S)

    def renew(tab, request: gr.Request):
        session = getattr(request, "session_hash", None)
        return "held" if session and lease.renew(session, tab == "race") else ""

    ticker.tick(renew, shows, held, api_visibility="private", queue=False, show_progress="hidden")
    demo.load(None, None, None, js=script(examples, idle_seconds), api_visibility="private", queue=False)
