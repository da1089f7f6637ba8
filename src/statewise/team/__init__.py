"""Teams: a leader agent delegating to member agents (or teams) on one shared state."""

from statewise.run.scope import SCOPE_KEY
from statewise.team.team import Team, TeamMode

__all__ = ["SCOPE_KEY", "Team", "TeamMode"]
