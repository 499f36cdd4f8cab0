"""A headless Chromium driven over the Chrome DevTools Protocol (CDP) through a pipe.

Chromium's --remote-debugging-pipe reads CDP commands from fd 3 and writes responses and events
to fd 4, each a JSON message ended by a NUL byte (chromium/src content/browser/devtools/
devtools_pipe_handler.cc); the same transport Playwright uses. A pipe needs no port, so the
browser can run inside a network namespace (`prefix=["ip", "netns", "exec", NS]`) and reach a
server on that namespace's loopback. Commands and events are those of the protocol's stable
domains (chromedevtools.github.io/devtools-protocol/tot/): Target.createTarget and
Target.attachToTarget (flatten: one session id per page), Page.navigate,
Page.captureScreenshot, Runtime.evaluate, Input.dispatchMouseEvent; console errors come as
Runtime.consoleAPICalled (type "error"), uncaught exceptions as Runtime.exceptionThrown, and
browser-side errors (a failed load, a Content-Security-Policy violation) as Log.entryAdded.
"""

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time


class CdpError(RuntimeError):
    pass


class Browser:
    def __init__(self, prefix=(), width=1400, height=1000):
        exe = shutil.which("chromium") or shutil.which("chromium-browser")
        if not exe:
            raise CdpError("chromium not installed (deploy/install-deps.sh)")
        self.profile = tempfile.mkdtemp(prefix="fabricscope-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # fds 3 and 4 in the child, whatever numbers the pipes got here: copies above 100 first
        # (close-on-exec, as os.pipe's are), so that dup2 to 3 and 4 clobbers neither.
        hi_r = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD_CLOEXEC, 100)
        hi_w = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD_CLOEXEC, 100)

        def child_fds():
            os.dup2(hi_r, 3)
            os.dup2(hi_w, 4)

        args = list(prefix) + [
            exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--no-default-browser-check", "--disable-extensions", "--hide-scrollbars",
            "--remote-debugging-pipe", f"--user-data-dir={self.profile}",
            f"--window-size={width},{height}", "about:blank"]
        self.log = open(os.path.join(self.profile, "chromium.log"), "w")
        self.proc = subprocess.Popen(args, preexec_fn=child_fds, close_fds=False,
                                     stdout=self.log, stderr=self.log)
        for fd in (to_browser_r, from_browser_w, hi_r, hi_w):
            os.close(fd)
        self._next = 0
        self._buf = b""
        self.events = []
        self.session = None

    # -- transport -----------------------------------------------------------------------------
    def _read_message(self, deadline):
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CdpError("no answer from chromium in time")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise CdpError("chromium closed its pipe (exit %s)" % self.proc.poll())
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method, params=None, session=True, timeout=30.0):
        """Sends one command (to the page's session unless session=False); returns its result."""
        self._next += 1
        msg = {"id": self._next, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        data = json.dumps(msg).encode() + b"\0"
        while data:
            data = data[os.write(self._to_browser, data):]
        deadline = time.monotonic() + timeout
        while True:
            m = self._read_message(deadline)
            if m.get("id") == self._next:
                if "error" in m:
                    raise CdpError(f"{method}: {m['error']}")
                return m.get("result", {})
            if "method" in m:
                self.events.append(m)

    def pump(self, seconds):
        """Collects events for `seconds` (the page keeps running meanwhile)."""
        deadline = time.monotonic() + seconds
        try:
            while True:
                m = self._read_message(deadline)
                if "method" in m:
                    self.events.append(m)
        except CdpError as e:
            if "in time" not in str(e):
                raise

    # -- page ----------------------------------------------------------------------------------
    def open(self, url):
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)
        self.session = self.send("Target.attachToTarget",
                                 {"targetId": target["targetId"], "flatten": True},
                                 session=False)["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            self.send(domain + ".enable")
        self.send("Page.navigate", {"url": url})

    def evaluate(self, expression, timeout=30.0):
        """The value of a JavaScript expression in the page (promises awaited)."""
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                           "awaitPromise": True}, timeout=timeout)
        if "exceptionDetails" in r:
            raise CdpError(f"{expression[:80]}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, what, expression, timeout=30.0):
        """Polls a JavaScript expression until it is truthy; returns its value."""
        deadline = time.monotonic() + timeout
        last = None
        while True:
            try:
                v = self.evaluate(expression)
                if v:
                    return v
            except CdpError as e:  # e.g. the page still loading: document.body null
                last = e
            if time.monotonic() > deadline:
                raise CdpError(f"timed out after {timeout:.0f} s waiting for {what}"
                               + (f" (last error: {last})" if last else ""))
            self.pump(0.25)

    def click(self, selector):
        """A real mouse click (pressed and released) at the centre of the element."""
        box = self.evaluate(f"""(() => {{
            const e = document.querySelector({json.dumps(selector)});
            if (!e) return null;
            e.scrollIntoView({{block: 'center'}});
            const r = e.getBoundingClientRect();
            return [r.x + r.width / 2, r.y + r.height / 2];
        }})()""")
        if not box:
            raise CdpError(f"nothing matches {selector}")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": box[0], "y": box[1],
                                                   "button": "left", "clickCount": 1})

    def screenshot(self, path):
        data = self.send("Page.captureScreenshot", {"format": "png",
                                                    "captureBeyondViewport": True})["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def errors(self):
        """Console errors, uncaught exceptions and browser-side error entries so far."""
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console: " + " ".join(str(a.get("value", a.get("description", "")))
                                                  for a in p.get("args", [])))
            elif e["method"] == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append("exception: " + d.get("exception", {}).get("description",
                                                                      d.get("text", "")))
            elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                entry = p["entry"]
                out.append(f"log: {entry.get('text')} {entry.get('url', '')}")
        return out

    def close(self):
        try:
            self.send("Browser.close", session=False, timeout=5)
        except (CdpError, OSError):
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)
