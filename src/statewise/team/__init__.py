"""Teams: a leader agent delegating to member agents (or teams) on one shared state."""

from statewise.team.team import SCOPE_KEY, Team, TeamMode

__all__ = ["SCOPE_KEY", "Team", "TeamMode"]
