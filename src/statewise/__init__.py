"""Statewise: stateful LLM agents whose session state is never lost."""
