"""An FTP server on 127.0.0.1 (pyftpdlib, in a thread): a real store whose "create if absent" is a plain
overwrite (fsspec's FTP file system sends STOR for ``open(path, "xb")``), for the build lease's probe."""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
from typing import Any

USER, PASSWORD = "fleet", "fleet-test"


class FtpServer:
    def __init__(self) -> None:
        from pyftpdlib.authorizers import DummyAuthorizer
        from pyftpdlib.handlers import FTPHandler
        from pyftpdlib.servers import FTPServer

        logging.getLogger("pyftpdlib").setLevel(logging.WARNING)
        self.home = tempfile.mkdtemp(prefix="ensure-flydsl-ftp-")
        authorizer = DummyAuthorizer()
        authorizer.add_user(USER, PASSWORD, self.home, perm="elradfmwMT")
        handler: Any = type("Handler", (FTPHandler,), {"authorizer": authorizer})
        self._server = FTPServer(("127.0.0.1", 0), handler)
        self.port = int(self._server.socket.getsockname()[1])
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        # One turn of the loop at a time, so that stop() closes the sockets only once the thread has left it:
        # closing them under a running poll() was an EBADF traceback in the server's thread.
        while not self._stopping.is_set():
            self._server.serve_forever(timeout=0.2, blocking=False, handle_exit=False)

    def start(self) -> "FtpServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=10)
        self._server.close_all()
        shutil.rmtree(self.home, ignore_errors=True)  # the server's files: nothing of a run is left in /tmp

    def url(self, path: str) -> str:
        return f"ftp://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{path}"
