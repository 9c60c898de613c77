"""`BackgroundServer`: uvicorn serving an app on a thread of this process (tests, the load
benchmark's in-process server). `port=0` takes a free port; `.url` says which. `http` and
`loop` are uvicorn's (auto: httptools and uvloop when installed, else h11 and asyncio);
`lifespan="off"` for a second server of the same app (the lifespan's end shuts the engine).
"""
from __future__ import annotations

import threading
import time


class BackgroundServer:
    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, timeout: float = 30.0, http: str = "auto",
                 loop: str = "auto", lifespan: str = "on"):
        import uvicorn
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan=lifespan,
                                timeout_graceful_shutdown=5, http=http, loop=loop)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="tilesafe-http", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the HTTP server did not start")
            time.sleep(0.02)
        sock = self.server.servers[0].sockets[0]
        self.host, self.port = sock.getsockname()[:2]
        self.url = f"http://{self.host}:{self.port}"

    def stop(self, timeout: float = 30.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
