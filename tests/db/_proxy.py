"""A TCP proxy that counts round trips, and can cut a connection after a request.

A round trip is the client sending (any number of packets) after the server last spoke:
pipelined messages count once, a request whose answer is split over packets counts once.
This measures what the network sees, independent of the driver's internals.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from urllib.parse import urlsplit, urlunsplit


class RoundTripProxy:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 0)
        self.listener = socket.create_server(("127.0.0.1", 0))
        port = self.listener.getsockname()[1]
        netloc = parts.netloc.replace(f"{parts.hostname}:{parts.port}", f"127.0.0.1:{port}")
        self.url = urlunsplit(parts._replace(netloc=netloc))
        self.round_trips = 0
        self.cut_after_request = False  # drop the next request's answer and the connection
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            self._sockets += [client, server]
            state = {"server_spoke": True}
            threading.Thread(
                target=self._pump, args=(client, server, state, True), daemon=True
            ).start()
            threading.Thread(
                target=self._pump, args=(server, client, state, False), daemon=True
            ).start()

    def _pump(
        self, src: socket.socket, dst: socket.socket, state: dict[str, bool], upstream: bool
    ) -> None:
        try:
            while data := src.recv(65536):
                with self._lock:
                    if upstream:
                        if state["server_spoke"]:
                            self.round_trips += 1
                        state["server_spoke"] = False
                    else:
                        state["server_spoke"] = True
                        if self.cut_after_request:
                            self.cut_after_request = False
                            raise OSError("cut")
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self.listener.close()
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.close()
