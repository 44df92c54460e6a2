"""The local OpenSearch node (lib/zerotrace/infra/opensearch_node.py) without starting one:
where its files go, when it counts as ready (cluster health green or yellow, asked of a
stand-in HTTP server here), and what status and down say when it does not run. Starting the
real server is tests/integration/test_infra.py's."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from zerotrace.infra.opensearch_node import LAUNCHER, POM, OpenSearchNode

pytestmark = pytest.mark.unit


class Health(BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        status = 200 if self.path == "/_cluster/health" else 404
        self.send_response(status)
        self.end_headers()
        self.wfile.write(self.body if status == 200 else b"{}")

    def log_message(self, *args: object) -> None:  # quiet
        pass


@pytest.fixture
def server() -> Iterator[HTTPServer]:
    httpd = HTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def test_its_files_and_address(tmp_path: Path) -> None:
    node = OpenSearchNode(tmp_path, port=9201, transport_port=9301)
    assert node.url == "http://127.0.0.1:9201"
    assert node.files.folder == tmp_path / "opensearch"
    assert node.lib_dir == tmp_path / "lib" / "opensearch"
    assert node.classes_dir == tmp_path / "lib" / "opensearch-launcher"
    assert POM.is_file() and LAUNCHER.is_file()


@pytest.mark.parametrize(
    ("body", "ready"),
    [
        (b'{"status": "green"}', True),
        (b'{"status": "yellow"}', True),
        (b'{"status": "red"}', False),
        (b"not json", False),
    ],
)
def test_ready_means_green_or_yellow(
    server: HTTPServer, tmp_path: Path, body: bytes, ready: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Health, "body", body)
    assert OpenSearchNode(tmp_path, port=server.server_address[1]).answers() is ready


def test_nobody_listening_is_not_ready(server: HTTPServer, tmp_path: Path) -> None:
    port = server.server_address[1]
    server.shutdown()
    server.server_close()
    assert not OpenSearchNode(tmp_path, port=port).answers()


def test_status_and_down_when_it_does_not_run(tmp_path: Path) -> None:
    node = OpenSearchNode(tmp_path)
    assert node.status() == "OpenSearch: stopped"
    assert node.down() is False
    node.files.folder.mkdir(parents=True)
    node.files.pid_file.write_text("999999999\n")  # stale
    assert node.status() == "OpenSearch: stopped"
    assert not node.files.pid_file.exists()
