"""The `statewise` command line. Nothing in the library imports it."""

from statewise.cli.app import app, main

__all__ = ["app", "main"]
