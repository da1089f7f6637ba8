"""A real MCP server for the MCPTools tests, built with the `mcp` package's own server API.

Run as `python mcp_server.py stdio` (a subprocess over stdin/stdout) or
`python mcp_server.py http PORT` (streamable HTTP on 127.0.0.1:PORT, path /mcp).
"""

from __future__ import annotations

import os
import sys
from typing import TypedDict

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("statewise-test", log_level="ERROR")


class Forecast(TypedDict):
    city: str
    sky: str
    celsius: int


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def forecast(city: str) -> Forecast:
    """The weather in a city, as structured data."""
    return {"city": city, "sky": "rain", "celsius": 7}


@server.tool()
def explode(message: str) -> str:
    """Always fails with `message`."""
    raise ToolError(message)


@server.tool(structured_output=False)
def echo(text: str) -> str:
    """Say `text` back."""
    return text


@server.tool()
def crash() -> str:
    """Kill this server at once (a crash mid-call)."""
    os._exit(3)


DOWN = os.environ.get("MCP_TEST_DOWN_FILE")  # while this file exists, the server won't start

if __name__ == "__main__":
    if DOWN and os.path.exists(DOWN):
        sys.exit("the server is down")
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
