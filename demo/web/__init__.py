"""Page parts beyond the race tab: kiosk mode, the scoreboard, recordings, the three-way race.

Like demo.ui, these know the engine's front door (demo.arena, demo.three_way,
demo.scoreboard, demo.recording), never OpenVINO. demo.ui builds the page and calls
`booth.add_tabs` and `booth.race_tab` from here; all model output and everything read
from a recording goes through demo.render's escaping renderers.
"""

from .booth import Booth
from .style import CSS

__all__ = ["Booth", "CSS"]
