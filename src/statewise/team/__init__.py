"""Teams: a leader agent delegating to member agents (or teams) on one shared state."""

from statewise.run.writer import WRITER_KEY
from statewise.team.team import Team, TeamMode

__all__ = ["WRITER_KEY", "Team", "TeamMode"]
