"""The queue dashboard (``GET /dashboard``) in a real headless browser: Debian's Chromium,
driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: JSON messages ended
by a NUL byte on file descriptors 3 and 4, so nothing but the standard library is needed).

The test types the admin key into the page's form as a user would, waits for the page's own
JavaScript to fetch ``/dashboard/queues`` and draw the table, then asserts on the rendered DOM
(queues, backlog, in-flight count, oldest age, acks per second from two polls, dead letters)
and saves a screenshot, which it decodes (PNG chunks, zlib, scanline filters: standard library)
to check it is not blank.

System tier (marked ``system``): needs the ``chromium`` package (.ci/run installs it for that
tier); skipped with one line where it is absent.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import struct
import subprocess
import time
import uuid
import zlib
from pathlib import Path

import pytest
from support.service_harness import start_server_on

pytestmark = pytest.mark.system

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class DevTools:
    """A Chromium started with ``--remote-debugging-pipe``, one page attached."""

    def __init__(self, profile: Path, width: int = 1280, height: int = 720):
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def fds() -> None:  # the browser reads commands on fd 3 and writes replies on fd 4
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)

        assert CHROMIUM
        self.proc = subprocess.Popen(
            [
                CHROMIUM,
                "--headless=new",
                "--no-sandbox",  # tests run as root in CI containers
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--remote-debugging-pipe",
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(profile.parent / "chromium.log").open("wb"),
            preexec_fn=fds,
            close_fds=False,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []
        self.session: str | None = None
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self.send("Page.enable")
        self.send("Runtime.enable")
        self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def _read(self) -> dict:
        while b"\0" not in self._buffer:
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, **params) -> dict:
        self._next_id += 1
        msg: dict = {"id": self._next_id, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            msg["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def evaluate(self, expression: str):
        result = self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, seconds: float):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.25)
        raise AssertionError(f"not true within {seconds:.0f} s: {expression}")

    def close(self) -> None:
        with contextlib.suppress(Exception):  # already gone: killed below
            self.send("Browser.close")
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        for fd in (self._to_browser, self._from_browser):
            os.close(fd)


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of raw pixel bytes) of an 8-bit RGB or RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert header is not None
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, header
    bpp = 3 if color == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, [bytes(r[i : i + bpp]) for r in rows for i in range(0, stride, bpp)]


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium: apt-get install chromium")
def test_the_dashboard_renders_queues_backlog_rates_age_and_dead_letters_in_chromium(
    cassandra, keyspace, tmp_path
):
    server = start_server_on(
        tmp_path / "server",
        cassandra,
        keyspace,
        "--bootstrap",
        "--stats-seconds",
        "1",  # the dashboard's data is a snapshot refreshed in the background
    )
    browser = None
    try:
        account = f"dash-{uuid.uuid4().hex[:6]}"
        key = server.admin("POST", "/accounts", account).json()["keys"]["primary"]
        auth = {"Authorization": f"Key {key}"}
        base = f"/api/v1/accounts/{account}/queues"
        assert server.call("POST", base, '{"queueName":"dlq"}', auth).status == 201
        create = {"queueName": "work", "maxDeliveryCount": 1, "dlqName": "dlq"}
        assert server.call("POST", base, json.dumps(create), auth).status == 201
        for i in range(12):
            assert server.call("POST", f"{base}/work/messages", f"m{i}", auth).status == 201

        def get(vt: int = 30) -> dict:
            r = server.call(
                "GET", f"{base}/work/messages/next?invisibilityTimeSeconds={vt}", None, auth
            )
            assert r.status == 200, r.body
            return r.json()

        def ack(msg: dict) -> None:
            r = server.call(
                "DELETE", f"{base}/work/messages?popReceipt={msg['popReceipt']}", None, auth
            )
            assert r.status == 204

        # m0 is delivered once and not acked: past maxDeliveryCount 1 it goes to the dlq
        assert get(vt=1)["message"] == "m0"
        time.sleep(1.5)
        for _ in range(3):
            ack(get())  # m1..m3; the first of these gets also moves m0 to the dlq
        in_flight = get()  # m4 stays in flight
        assert in_flight["message"] == "m4"

        browser = DevTools(tmp_path / "profile")
        browser.send("Page.navigate", url=f"http://127.0.0.1:{server.port}/dashboard")
        browser.wait_for("document.readyState === 'complete'", 30)
        assert browser.evaluate("document.title") == "cassieq queues"
        assert browser.evaluate("document.getElementById('status').textContent") == (
            "Enter the admin or the metrics key."
        )
        # typed into the form as a user would; the page's script sends it as a header
        browser.evaluate(
            f"document.getElementById('key').value = {json.dumps(server.admin_key)};"
            "document.querySelector('#login button').click(); true"
        )
        browser.wait_for("document.querySelectorAll('#queues tbody tr').length >= 2", 30)
        ack(get())  # m5, between two polls of the page (every 5 s): a rate above 0
        ack(get())  # m6
        rows_js = """
            Object.fromEntries([...document.querySelectorAll('#queues tbody tr')].map(tr =>
              [tr.dataset.queue, [...tr.children].map(td => td.textContent)]))
        """
        browser.wait_for(f"(r => Number(r[{json.dumps(account + '.work')}][7]) > 0)({rows_js})", 30)
        rows = browser.evaluate(rows_js)
        headers = browser.evaluate(
            "[...document.querySelectorAll('#queues th')].map(th => th.textContent)"
        )
        status = browser.evaluate("document.getElementById('status').textContent")
        shot = base64.b64decode(browser.send("Page.captureScreenshot", format="png")["data"])
    finally:
        if browser is not None:
            browser.close()
        server.stop()

    assert headers == [
        "queue",
        "backlog",
        "in flight",
        "delayed",
        "oldest age (s)",
        "enqueued",
        "acked",
        "acks/s",
        "dead letters",
        "dead-letter queue",
    ]
    assert status.startswith("2 queues, updated"), status
    work = dict(zip(headers, rows[f"{account}.work"], strict=True))
    # 12 put: m0 dead-lettered, m1-m3 and m5-m6 acked, m4 in flight, m7-m11 waiting
    assert work["backlog"] == "5", work
    assert work["in flight"] == "1", work
    assert work["enqueued"] == "12", work
    assert work["acked"] == "5", work
    assert float(work["acks/s"]) > 0, work
    assert work["dead letters"] == "1", work
    assert work["dead-letter queue"] == f"{account}.dlq", work
    assert float(work["oldest age (s)"]) > 0, work
    dlq = dict(zip(headers, rows[f"{account}.dlq"], strict=True))
    assert dlq["backlog"] == "1", dlq

    path = tmp_path / "dashboard.png"
    path.write_bytes(shot)
    target = os.environ.get("CASSIEQ_TEST_SCREENSHOTS")
    if target:  # keep it where a person can look at it
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(target) / "dashboard.png")
    width, height, pixels = png_pixels(shot)
    assert (width, height) == (1280, 720)
    distinct = len(set(pixels))
    # a blank page is one colour; text, rules and the table header add many more
    assert distinct >= 20, f"{distinct} distinct pixel values in {path}"
    dark = sum(1 for p in pixels if p[0] < 100 and p[1] < 100 and p[2] < 100)
    assert dark > 1000, f"only {dark} dark (text) pixels in {path}"
