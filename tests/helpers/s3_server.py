"""A real S3-compatible server for the cache's tests: moto's server mode on 127.0.0.1, started and stopped here.

s3fs finds it through the standard AWS environment variables (``AWS_ENDPOINT_URL_S3`` and the dummy
credentials in :meth:`S3Server.env`), exactly as a user points the cache at MinIO or Ceph.
"""

from __future__ import annotations

import socket
import time
import urllib.request
from typing import Any, Dict

ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class S3Server:
    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)

    def start(self) -> "S3Server":
        self._server.start()
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=2).close()
                return self
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        self._server.stop()

    def env(self) -> Dict[str, str]:
        """What a user exports to point s3fs (and so FLYDSL_CACHE=s3://...) at a non-AWS endpoint."""
        return {
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": REGION,
        }

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY, region_name=REGION)

    def make_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)
