"""Records: the scoreboard, race recordings, and what a finished race leaves behind."""
