"""Headless Chromium driven through the DevTools protocol (aiohttp's websocket client, already
a dependency of MLflow's stack): open a page, run JavaScript in it, take a screenshot. Used by
the browser test of the MLflow UI; Debian's ``chromium`` package provides the browser."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def chromium() -> str | None:
    """The Chromium executable on PATH, or None."""
    return next((found for name in CANDIDATES if (found := shutil.which(name))), None)


class Page:
    """One browser tab: ``call`` sends a DevTools command and waits for its answer."""

    def __init__(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        self.socket = socket
        self.ids = itertools.count(1)

    async def call(self, method: str, **params: Any) -> dict:
        number = next(self.ids)
        await self.socket.send_json({"id": number, "method": method, "params": params})
        while True:
            message = json.loads((await self.socket.receive()).data)
            if message.get("id") == number:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    async def evaluate(self, script: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=script, returnByValue=True,
                                 awaitPromise=True)
        return result.get("result", {}).get("value")

    async def open(self, url: str) -> None:
        await self.call("Page.navigate", url=url)

    async def wait_for(self, script: str, timeout: float = 60) -> Any:
        """Poll ``script`` until it returns something truthy (the page renders late)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = await self.evaluate(script)
            if value:
                return value
            await asyncio.sleep(0.5)
        raise TimeoutError(f"page never satisfied: {script}")

    async def click_text(self, text: str, last: bool = False) -> bool:
        """Click (a real mouse press and release) the visible element whose own text is
        ``text`` exactly; False when there is none. ``last``: the last such element in the
        page (a menu opened on top, which the page appends after its own text)."""
        find = "findLast" if last else "find"
        box = await self.evaluate(f"""(() => {{
            const hit = Array.from(document.querySelectorAll('*')).{find}(
                e => Array.from(e.childNodes).some(
                         n => n.nodeType === 3 && n.textContent.trim() === {text!r})
                     && e.getBoundingClientRect().width > 0);
            if (!hit) return null;
            hit.scrollIntoView({{block: 'center', inline: 'center'}});
            const r = hit.getBoundingClientRect();
            return [r.x + r.width / 2, r.y + r.height / 2];
        }})()""")
        if not box:
            return False
        for kind in ("mousePressed", "mouseReleased"):
            await self.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1],
                            button="left", clickCount=1)
        return True

    async def text(self) -> str:
        return await self.evaluate("document.body ? document.body.innerText : ''") or ""

    async def screenshot(self, path: Path) -> Path:
        shot = await self.call("Page.captureScreenshot", format="png", captureBeyondViewport=False)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


@contextlib.asynccontextmanager
async def browser(width: int = 1800, height: int = 1000) -> AsyncIterator[Page]:
    """A headless Chromium with one page; stopped (and its profile deleted) afterwards."""
    executable = chromium()
    if executable is None:
        raise RuntimeError("no Chromium on PATH")
    profile = tempfile.mkdtemp(prefix="multilab-chromium-")
    process = subprocess.Popen(
        [executable, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-dev-shm-usage", f"--window-size={width},{height}",
         f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        port = _debugging_port(Path(profile), process)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
            target = next(t for t in json.load(answer) if t["type"] == "page")
        async with aiohttp.ClientSession() as session, session.ws_connect(
                target["webSocketDebuggerUrl"], max_msg_size=0) as socket:
            page = Page(socket)
            await page.call("Page.enable")
            await page.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                            deviceScaleFactor=1, mobile=False)
            yield page
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(profile, ignore_errors=True)


def _debugging_port(profile: Path, process: subprocess.Popen, timeout: float = 60) -> int:
    """Chromium writes the port it picked into ``DevToolsActivePort`` of its profile."""
    deadline = time.monotonic() + timeout
    marker = profile / "DevToolsActivePort"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"chromium exited {process.returncode}")
        if marker.exists() and marker.read_text().strip():
            return int(marker.read_text().splitlines()[0])
        time.sleep(0.2)
    raise TimeoutError("chromium opened no DevTools port")
