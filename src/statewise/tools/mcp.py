"""`MCPTools`: the tools of a Model Context Protocol server, as an agent's tools.

    tools=[MCPTools(command=["python", "server.py"])]        # a subprocess, over stdio
    tools=[MCPTools(url="http://127.0.0.1:8000/mcp")]        # streamable HTTP

Built on the official `mcp` SDK (the `mcp` extra). Nothing connects at construction: the
first run connects, lists the server's tools (following pagination) and keeps that list;
later runs reuse it. A call that fails at the transport (the server crashed, hung, or broke
the protocol) is that call's error and drops the connection; the next call reconnects,
trying a few times with growing pauses (`RECONNECT_DELAYS`) before a clear error. Each tool becomes a `Function` whose parameters are the server's input
schema, so it goes through the same path as any tool: `before_tool_callback`, `tool_hooks`,
`after_tool_callback`, and state writes kept only if the call succeeds. Arguments are sent
as the model gave them (the server validates them); a result the server flags as an error
(or a failed call) becomes the tool's error result, which the model sees.

The connection belongs to one event loop: a task on that loop opens it and, when asked,
closes it again (the SDK's transports must be closed by the task that opened them). A run
on another loop opens its own. Close with `await tools.aclose()`, `async with tools:`, or
through the agent (`await agent.aclose()`, `async with agent:`); a loop that ends without
that cancels the task, which closes the connection too.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from statewise.exceptions import ConfigurationError, MissingDependencyError, RunError
from statewise.tools._introspect import check_tool_name
from statewise.tools.errors import ToolArgumentsError
from statewise.tools.function import Function

MAX_PAGES = 100
RECONNECT_DELAYS = (0.0, 0.25, 1.0)
"""Seconds before each attempt to reconnect to a server whose connection failed: a
restarting server gets about a second and a quarter, then the call is a clear error."""


class MCPToolError(Exception):
    """An MCP server answered a tool call with an error result."""


class ToolSource:
    """Tools that are only known once a run starts (they are listed from somewhere).

    An agent's `tools=[...]` may hold these next to functions and toolkits; the run calls
    `functions()` before its first model request, and `aclose()` when the agent closes.
    """

    async def functions(self) -> list[Function]:
        raise NotImplementedError

    async def aclose(self) -> None:
        """Release what `functions()` opened."""


class MCPFunction(Function):
    """A tool of an MCP server: the server's schema describes it (there is no Python
    signature to read), and its arguments go to the server as a JSON object, as is."""

    __slots__ = ("_parameters", "server")

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        name: str,
        description: str,
        parameters: dict[str, Any],
        server: str,
    ) -> None:
        self.function = function
        self.name = name
        self._description = description
        self.requires_confirmation = False
        self._parameters = parameters
        self.server = server
        self._definition = None

    @property
    def description(self) -> str:
        return self._description or ""

    @property
    def parameters(self) -> dict[str, Any]:
        return self._parameters

    @property
    def injected(self) -> frozenset[str]:
        return frozenset()

    @property
    def is_async(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"MCPFunction(name={self.name!r}, server={self.server!r})"

    def validate_arguments(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(arguments, Mapping) or not all(isinstance(k, str) for k in arguments):
            raise ToolArgumentsError(self.name, ["arguments must be a JSON object"])
        return dict(arguments)

    def invoke(self, arguments: Mapping[str, Any], injected: Mapping[str, Any]) -> Any:
        return self.function(**self.validate_arguments(arguments))


@dataclass(eq=False)
class _Connection:
    """An open client session, held by a task on the loop that opened it."""

    loop: asyncio.AbstractEventLoop
    client: Any = None
    task: asyncio.Task[None] | None = None
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    error: BaseException | None = None

    async def close(self) -> None:
        self.stop.set()
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self.task


class MCPTools(ToolSource):
    """The tools of one MCP server: `command=[...]` starts it as a subprocess and talks
    over stdio; `url=` connects over streamable HTTP.

    - `env`, `cwd`: for the subprocess (the environment is added to the SDK's safe default).
    - `include` / `exclude`: tool names to keep / drop.
    - `prefix`: prepended to every tool name (`prefix="files_"`), to keep names unique
      across servers.
    - `timeout`: seconds to wait for each answer from the server.
    """

    def __init__(
        self,
        command: Sequence[str] | str | None = None,
        *,
        url: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        include: Sequence[str] | None = None,
        exclude: Sequence[str] | None = None,
        prefix: str = "",
        timeout: float = 30.0,
    ) -> None:
        if (command is None) == (url is None):
            raise ConfigurationError(
                "MCPTools needs exactly one of command=[...] (a stdio server) or url=... "
                "(a streamable HTTP server)"
            )
        argv = shlex.split(command) if isinstance(command, str) else list(command or [])
        if command is not None and (not argv or not all(isinstance(a, str) for a in argv)):
            raise ConfigurationError(
                f"MCPTools command must be a non-empty list of strings, got {command!r}"
            )
        if url is not None and not url.startswith(("http://", "https://")):
            raise ConfigurationError(f"MCPTools url must be an http(s) URL, got {url!r}")
        if timeout <= 0:
            raise ConfigurationError(f"MCPTools timeout must be positive, got {timeout}")
        self.command = argv or None
        self.url = url
        self.env = dict(env or {})
        self.cwd = cwd
        self.include = set(include) if include is not None else None
        self.exclude = set(exclude or ())
        self.prefix = prefix
        self.timeout = timeout
        self.label = url if url is not None else shlex.join(argv)
        self._functions: list[Function] | None = None
        self._connections: dict[asyncio.AbstractEventLoop, _Connection] = {}
        self._locks: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}
        self._connect_locks: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}
        self._dropped: set[asyncio.AbstractEventLoop] = set()  # reconnect with backoff

    def __repr__(self) -> str:
        return f"MCPTools({self.label!r})"

    async def functions(self) -> list[Function]:
        """The server's tools, listed on the first call (connecting) and kept."""
        if self._functions is None:
            async with self._lock():
                if self._functions is None:
                    client = await self._client()
                    self._functions = await self._list(client)
        return list(self._functions)

    async def call(self, name: str, arguments: Mapping[str, Any]) -> Any:
        """Call the server's tool `name` (its own name, without `prefix`)."""
        client = await self._client()
        try:
            result = await client.call_tool(
                name, dict(arguments), read_timeout_seconds=self.timeout
            )
        except Exception as exc:
            # The server crashed, hung or broke the protocol: this call fails, and the
            # connection is let go so the next call opens a fresh one.
            self._drop(client)
            raise MCPToolError(f"MCP server {self.label!r} failed the call: {exc}") from exc
        return _result_value(result)

    async def aclose(self) -> None:
        """Close the connection opened on the running loop (and forget the others: their
        loops closed them, or will when they end)."""
        loop = asyncio.get_running_loop()
        connection = self._connections.pop(loop, None)
        self._connections = {k: v for k, v in self._connections.items() if not k.is_closed()}
        if connection is not None:
            await connection.close()

    async def __aenter__(self) -> MCPTools:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ---- connecting --------------------------------------------------------------------

    def _lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        lock = self._locks.get(loop)
        if lock is None:
            self._locks = {k: v for k, v in self._locks.items() if not k.is_closed()}
            lock = self._locks[loop] = asyncio.Lock()
        return lock

    def _live(self, loop: asyncio.AbstractEventLoop) -> Any:
        connection = self._connections.get(loop)
        if connection is not None and connection.task is not None and not connection.task.done():
            return connection.client
        return None

    async def _client(self) -> Any:
        loop = asyncio.get_running_loop()
        client = self._live(loop)
        if client is not None:
            return client
        async with self._connecting():
            client = self._live(loop)  # another call connected while this one waited
            if client is not None:
                return client
            if loop not in self._dropped:
                return await self._connect(loop, first=True)
            # Reconnecting after a failure: a server that is restarting gets a few tries.
            for delay in RECONNECT_DELAYS:
                await asyncio.sleep(delay)
                try:
                    client = await self._connect(loop, first=False)
                except RunError as exc:
                    failure = exc
                    continue
                self._dropped.discard(loop)
                return client
            raise RunError(
                f"cannot reconnect to MCP server {self.label!r} after "
                f"{len(RECONNECT_DELAYS)} attempts (its connection failed earlier): {failure}"
            ) from failure

    async def _connect(self, loop: asyncio.AbstractEventLoop, *, first: bool) -> Any:
        connection = _Connection(loop=loop)
        connection.task = loop.create_task(self._hold(connection), name=f"mcp {self.label}")
        await connection.ready.wait()
        if connection.error is not None:
            reason = f"{type(connection.error).__name__}: {connection.error}"
            if first:
                raise RunError(
                    f"cannot connect to MCP server {self.label!r}: {reason}"
                ) from connection.error
            raise RunError(reason) from connection.error
        self._connections[loop] = connection
        return connection.client

    def _drop(self, client: Any) -> None:
        """Let go of the connection that `client` belongs to (its task closes it)."""
        loop = asyncio.get_running_loop()
        connection = self._connections.get(loop)
        if connection is not None and connection.client is client:
            del self._connections[loop]
            connection.stop.set()
            self._dropped.add(loop)

    def _connecting(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        lock = self._connect_locks.get(loop)
        if lock is None:
            self._connect_locks = {
                k: v for k, v in self._connect_locks.items() if not k.is_closed()
            }
            lock = self._connect_locks[loop] = asyncio.Lock()
        return lock

    async def _hold(self, connection: _Connection) -> None:
        """Open the session, hand it over, keep it open until asked to stop."""
        try:
            async with _open_client(self) as client:
                connection.client = client
                connection.ready.set()
                await connection.stop.wait()
        except Exception as exc:  # reported to whoever waits for `ready`
            connection.error = exc
        finally:
            connection.ready.set()

    async def _list(self, client: Any) -> list[Function]:
        tools: list[Any] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools += page.tools
            cursor = page.next_cursor
            if not cursor:
                break
        functions: list[Function] = []
        for tool in tools:
            if (self.include is not None and tool.name not in self.include) or (
                tool.name in self.exclude
            ):
                continue
            functions.append(self._function(tool))
        return functions

    def _function(self, tool: Any) -> Function:
        remote = str(tool.name)

        async def call_remote(**arguments: Any) -> Any:
            return await self.call(remote, arguments)

        schema = dict(tool.input_schema or {})
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        return MCPFunction(
            call_remote,
            name=check_tool_name(self.prefix + remote),
            description=tool.description or tool.title or "",
            parameters=schema,
            server=self.label,
        )


def _open_client(tools: MCPTools) -> Any:
    try:
        import mcp
    except ImportError as exc:
        raise MissingDependencyError("mcp", "mcp") from exc
    target: Any
    if tools.url is not None:
        target = tools.url
    else:
        assert tools.command is not None
        target = mcp.StdioServerParameters(
            command=tools.command[0],
            args=tools.command[1:],
            env=tools.env or None,
            cwd=tools.cwd,
        )
    return mcp.Client(target, read_timeout_seconds=tools.timeout)


def _result_value(result: Any) -> Any:
    """What the tool returned, for `format_tool_result`: the structured content when the
    server gave one, else the text of its content blocks (other blocks as JSON)."""
    blocks = list(result.content or [])
    texts = [b.text if getattr(b, "type", None) == "text" else b.model_dump_json() for b in blocks]
    text = "\n".join(texts)
    if result.is_error:
        raise MCPToolError(text or "the MCP server reported an error")
    if result.structured_content is not None:
        return result.structured_content
    return text
