"""rolecall report: loading run dirs, the page it writes, and that page in a real headless browser."""
from __future__ import annotations

import json
import math
import os
import random
import re
import select
import shutil
import struct
import subprocess
import time
import zlib
from pathlib import Path

import pytest
import yaml

from rolecall.report import ReportError, build_page, load_run, normalise, write_report
from rolecall.report.load import discover_roles, run_names
from rolecall.report.svg import axis, thin

ROLES = ["orchestrator", "worker", "synthesizer"]
HOSTILE = "<img src=x onerror=\"document.title='pwned'\">"


# -- synthetic run directories ------------------------------------------------------------------
def write_run(d: Path, *, routing="isolated", steps=60, val_every=10, seed=0, amplify: str | None = "worker",
              cliff: int | None = 50, alarms=(), roles=ROLES, workflow="orch_workers", tail: str = "") -> Path:
    """A run dir shaped like the trainer's: step-0 validation, training rows, val rows, alarm events.

    Step 7 logs NaN χ² for every role; step 9 leaves the second role's metrics out entirely.
    """
    rng = random.Random(seed)
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(yaml.safe_dump({"workflow": {"name": workflow}, "routing": routing}))

    def val_acc(s: int) -> float:
        drop = 0.22 * min(1.0, (s - cliff) / 10) if cliff is not None and s >= cliff else 0.0
        return round(0.41 + 0.3 * (1 - math.exp(-s / 14)) - drop + rng.uniform(-0.015, 0.015), 4)

    rows: list[dict] = [{"step": 0, "val/accuracy": val_acc(0), "val/reward/mean": 0.4, "time/elapsed_s": 40.0}]
    for s in range(1, steps + 1):
        row: dict = {"step": s, "reward/mean": min(1.0, 0.35 + 0.35 * (1 - math.exp(-s / 12)) + rng.uniform(-0.08, 0.08)),
                     "time/step_s": 30 + rng.random(), "time/elapsed_s": 40.0 + 31 * s}
        for j, role in enumerate(roles):
            grow = 1 + 30 * (s / steps) ** 3 if role == amplify else 1 + 0.15 * rng.random()
            row.update({
                f"role/{role}/chi2_token": 0.02 * grow * (1 + 0.2 * rng.random()),
                f"role/{role}/chi2_seq": 0.1 * grow,
                f"role/{role}/training_ppl": 1.3 * (1 + 0.08 * (grow - 1)) * (1 + 0.02 * rng.random()),
                f"role/{role}/rollout_ppl": 1.3,
                f"role/{role}/grad_norm": 0.4 * grow ** 0.5 * (1 + 0.3 * rng.random()),
                f"role/{role}/len_p50": (120 + 180 * j) * (1 + 0.002 * s) + rng.uniform(-10, 10),
                f"role/{role}/len_p95": (260 + 320 * j) * (1 + 0.004 * s) + rng.uniform(-20, 20),
                f"role/{role}/truncated_frac": 0.01, f"role/{role}/entropy": 0.6,
            })
        if s == 7:
            row.update({f"role/{role}/chi2_token": float("nan") for role in roles})
        if s == 9:
            row = {k: v for k, v in row.items() if not k.startswith(f"role/{roles[-1 if len(roles) < 2 else 1]}/")}
        row["policy/shared/grad_norm" if routing == "shared" else f"policy/{roles[0]}/grad_norm"] = 0.5
        rows.append(row)
        if s % val_every == 0:
            rows.append({"step": s, "val/accuracy": val_acc(s), "time/elapsed_s": 40.0 + 31 * s + 20})
        rows += [{"step": s, "event": "alarm", "alarm": a, "role": r, "message": m} for st, a, r, m in alarms if st == s]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)
    return d


@pytest.fixture
def runs(tmp_path):
    ip = write_run(tmp_path / "voting-ip", alarms=[
        (38, "gradient_amplification", "worker", "worker χ² at 18× its first value while other roles stay flat"),
        (52, "validation_cliff", None, "val/accuracy 0.49 is 0.2 below its peak 0.70 (step 40)")])
    sp = write_run(tmp_path / "voting-sp", routing="shared", seed=1, amplify=None, cliff=None, alarms=[
        (45, "sp_role_capture", "synthesizer", f"synthesizer length drifting toward worker {HOSTILE}")],
        tail='{"step": 61, "reward/mean": 0.')
    ctrl = write_run(tmp_path / "sa-rl", workflow="single", roles=["solver"], seed=2, amplify=None, cliff=None)
    return ip, sp, ctrl


# -- loading ------------------------------------------------------------------------------------
def test_load_nan_missing_keys_and_roles(runs):
    run = load_run(runs[0])
    assert run.roles == ROLES
    assert run.workflow == "orch_workers" and run.routing == "isolated"
    steps, chi2 = run.series("role/worker/chi2_token")
    assert 9 not in steps and len(steps) == 59  # step 9 did not log the worker
    assert math.isnan(chi2[steps.index(7)])
    vx, vy = run.series("val/accuracy")
    assert vx == [0, 10, 20, 30, 40, 50, 60] and all(math.isfinite(v) for v in vy)
    assert [a["alarm"] for a in run.alarms] == ["gradient_amplification", "validation_cliff"]
    assert run.series("no/such/key") == ([], [])
    assert not run.warnings


def test_null_and_non_numbers_become_nan(tmp_path):
    d = tmp_path / "r"
    d.mkdir()
    (d / "metrics.jsonl").write_text('{"step": 1, "reward/mean": null}\n{"step": 2, "reward/mean": "x"}\n'
                                     '{"step": 3, "reward/mean": true}\n{"step": 4, "reward/mean": Infinity}\n')
    run = load_run(d)
    _, ys = run.series("reward/mean")
    assert all(math.isnan(y) for y in ys[:3]) and ys[3] == math.inf
    assert any("config.yaml: missing" in w for w in run.warnings) and run.workflow == "?"


def test_truncated_last_line_is_skipped_with_warning(runs):
    run = load_run(runs[1])
    assert run.last_step == 60
    assert len(run.warnings) == 1 and "metrics.jsonl:" in run.warnings[0] and "truncated" in run.warnings[0]
    assert "truncated last line" in build_page([run])


def test_bad_line_mid_file_names_file_and_line(tmp_path):
    d = tmp_path / "r"
    d.mkdir()
    (d / "metrics.jsonl").write_text('{"step": 0, "val/accuracy": 0.5}\n{"step": 1, "reward/me\n{"step": 2}\n')
    with pytest.raises(ReportError, match=r"metrics\.jsonl:2: not valid JSON"):
        load_run(d)
    (d / "metrics.jsonl").write_text('{"step": 0}\n[1, 2]\n{"step": 2}\n')
    with pytest.raises(ReportError, match=r"metrics\.jsonl:2: expected a JSON object"):
        load_run(d)
    (d / "metrics.jsonl").write_text('{"step": 0}\n\n{"step": "3"}\n')
    with pytest.raises(ReportError, match=r"metrics\.jsonl:3: every row needs an integer 'step'"):
        load_run(d)


def test_not_a_run_dir_and_empty_metrics(tmp_path):
    with pytest.raises(ReportError, match="no metrics.jsonl"):
        load_run(tmp_path)
    with pytest.raises(ReportError, match="not a directory"):
        load_run(tmp_path / "missing")
    (tmp_path / "metrics.jsonl").write_text("\n")
    with pytest.raises(ReportError, match="empty"):
        load_run(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "rew')  # only a truncated line: nothing to report
    with pytest.raises(ReportError, match="empty"):
        load_run(tmp_path)
    assert issubclass(ReportError, ValueError)


def test_normalise_to_first_finite_value():
    nan = float("nan")
    out = normalise([nan, 0.0, 2.0, 4.0, nan, 1.0])
    assert math.isnan(out[0]) and out[1:4] == [0.0, 1.0, 2.0] and math.isnan(out[4]) and out[5] == 0.5
    assert normalise([-2.0, -4.0]) == [-1.0, -2.0]
    assert all(math.isnan(v) for v in normalise([nan, 0.0]))
    assert normalise([]) == []


def test_role_discovery_order_and_slashes():
    rows = [{"step": 1, "reward/mean": 1, "role/b/x": 1, "policy/p/grad_norm": 1},
            {"step": 2, "role/a/x": 1, "role/b/y": 2, "role/</script>/kl": 0, "role/": 1, "role/c": 2}]
    assert discover_roles(rows) == ["b", "a", "</script>"]


def test_thin_keeps_extremes_per_pixel():
    seg = [(float(x), 100.0 if x == 5000 else math.sin(x)) for x in range(20000)]
    out = thin(seg, lambda x: x / 20000 * 400)
    assert len(out) <= 4 * 400 and (5000.0, 100.0) in out and out[0] == seg[0] and out[-1] == seg[-1]
    assert thin(seg[:50], lambda x: x) == seg[:50]


def test_axis_ticks_and_run_names(tmp_path):
    lo, hi, ticks = axis(0.03, 0.97)
    assert lo <= 0.03 and hi >= 0.97 and len(ticks) >= 4 and ticks == sorted(ticks)
    assert axis(5.0, 5.0)[0] < 5.0 < axis(5.0, 5.0)[1]
    assert run_names([tmp_path / "a" / "run", tmp_path / "b" / "run"]) == ["a/run", "b/run"]
    assert run_names([tmp_path / "x", tmp_path / "y"]) == ["x", "y"]


# -- the page -----------------------------------------------------------------------------------
def test_page_sections_overlay_and_control(runs, tmp_path):
    out = write_report(list(runs[:2]), tmp_path / "r.html", control=runs[2])
    page = out.read_text()
    assert "<svg" in page and "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in page and "src=" not in page.replace("src=x", "")
    for text in ("Training success rate", "Validation accuracy", "token χ²", "training perplexity", "grad norm",
                 "worker: completion length", "Alarm timeline", "SA-RL control", "voting-ip", "voting-sp",
                 "base · voting-ip", "orch_workers", "isolated / shared", "gradient_amplification"):
        assert text in page, text
    # one line per (run, role) in each per-role diagnostic, overlaid: 2 runs x 3 roles
    assert page.count("voting-sp · synthesizer</title>") >= 3
    assert page.count('class="alarm"') == 3


def test_single_run_colours_roles_and_defaults(runs, tmp_path):
    page = build_page([load_run(runs[0])])
    assert "SA-RL control" not in page and "rolecall report: voting-ip" in page
    assert "base (step-0 validation)" in page
    assert "<title>worker</title>" in page  # one line per role, labelled by role


def test_hostile_names_are_escaped(tmp_path):
    evil = "<script>alert(1)</script>"
    d = tmp_path / HOSTILE
    d.mkdir()
    rows = [{"step": 0, "val/accuracy": 0.5},
            {"step": 1, "reward/mean": 0.5, f"role/{evil}/chi2_token": 1.0, f"role/{evil}/len_p50": 10.0},
            {"step": 1, "event": "alarm", "alarm": evil, "role": evil, "message": evil + "&amp;"}]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "config.yaml").write_text(yaml.safe_dump({"workflow": {"name": evil}, "routing": {evil: "p"}}))
    page = build_page([load_run(d)], title=evil)
    assert evil not in page and HOSTILE not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&amp;amp;" in page
    # the only executable script is ours; hover data sits in inert JSON blocks with '<' escaped
    assert len(re.findall(r"<script>", page)) == 1
    assert len(re.findall(r"<script", page)) == 1 + page.count('type="application/json"')
    blobs = re.findall(r'<script type="application/json"[^>]*>(.*?)</script>', page, re.S)
    assert blobs and not any("<" in b for b in blobs)
    labels = [s["label"] for b in blobs for s in json.loads(b)["series"]]
    assert HOSTILE in labels and evil in labels


# -- a real browser -----------------------------------------------------------------------------
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium)")


def chromium_flags(profile: Path) -> list[str]:
    return ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-dev-shm-usage", "--hide-scrollbars", "--force-device-scale-factor=1",
            f"--user-data-dir={profile}"]


class Cdp:
    """Chrome DevTools Protocol over --remote-debugging-pipe: commands on fd 3, replies on fd 4, NUL-framed.

    bash moves our pipe ends onto fds 3 and 4 (dash cannot redirect fds above 9).
    """

    def __init__(self, profile: Path, log: Path) -> None:
        to_chrome, self._w = os.pipe()
        self._r, from_chrome = os.pipe()
        argv = [*chromium_flags(profile), "--remote-debugging-pipe", "about:blank"]
        self.proc = subprocess.Popen(["/bin/bash", "-c", f'exec "$0" "$@" 3<&{to_chrome} 4>&{from_chrome}', CHROMIUM, *argv],
                                     pass_fds=(to_chrome, from_chrome), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=log.open("wb"))
        os.close(to_chrome)
        os.close(from_chrome)
        self._buf, self._id, self.events = b"", 0, []

    def _recv(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._r], [], [], left)[0]:
                raise TimeoutError("no reply from chromium")
            chunk = os.read(self._r, 1 << 16)
            if not chunk:
                raise EOFError("chromium closed the debugging pipe")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 15) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}, **({"sessionId": session} if session else {})}
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            m = self._recv(deadline)
            if m.get("id") == self._id:
                assert "error" not in m, (method, m["error"])
                return m["result"]
            self.events.append(m)

    def wait_for(self, method: str, since: int = 0, timeout: float = 15) -> dict:
        """The first `method` event at or after index `since` of self.events."""
        deadline = time.monotonic() + timeout
        while not any(m.get("method") == method for m in self.events[since:]):
            self.events.append(self._recv(deadline))
        return next(m for m in self.events[since:] if m.get("method") == method)

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except (EOFError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._w)
        os.close(self._r)


def png_pixels(path: Path) -> tuple[int, int, set[tuple[int, ...]]]:
    """Width, height and the set of distinct colours of an 8-bit RGB/RGBA PNG (stdlib zlib + struct)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = ihdr
    assert depth == 8 and ctype in (2, 6) and interlace == 0, ihdr
    bpp = 3 if ctype == 2 else 4
    raw, stride = zlib.decompress(idat), w * bpp
    prev, colours = bytearray(stride), set()
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif f == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif f == 3:
            for i in range(stride):
                line[i] = (line[i] + ((line[i - bpp] if i >= bpp else 0) + prev[i]) // 2) & 255
        elif f == 4:
            for i in range(stride):
                a, b, c = (line[i - bpp] if i >= bpp else 0), prev[i], (prev[i - bpp] if i >= bpp else 0)
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        if y % 4 == 0:  # every 4th row is plenty to see the plots' colours
            colours.update(bytes(line[i:i + 3]) for i in range(0, stride, bpp))
        prev = line
    return w, h, {tuple(c) for c in colours}


def is_problem(m: dict) -> bool:
    """An uncaught exception, a console error/warning, or a browser log error (CSP, failed load, bad SVG)."""
    p = m.get("params", {})
    return (m.get("method") == "Runtime.exceptionThrown"
            or (m.get("method") == "Runtime.consoleAPICalled" and p["type"] in ("error", "warning", "assert"))
            or (m.get("method") == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning")))


@needs_chromium
def test_report_in_headless_chromium(runs, tmp_path):
    page = write_report(list(runs[:2]), tmp_path / "report.html", control=runs[2])
    url = page.resolve().as_uri()

    # (a) load it over the DevTools protocol and collect every error, console message and request
    cdp = Cdp(tmp_path / "profile", tmp_path / "cdp.log")
    try:
        target = cdp.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        s = cdp.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Network", "Page"):
            cdp.send(f"{domain}.enable", session=s)
        cdp.send("Page.navigate", {"url": url}, session=s)
        cdp.wait_for("Page.loadEventFired")
        probe = ("JSON.stringify({ready: document.body.dataset.ready, charts: +document.body.dataset.charts,"
                 " lines: document.querySelectorAll('svg.chart path.line').length,"
                 " figures: document.querySelectorAll('figure.plot').length, title: document.title,"
                 " box: (el => (el.scrollIntoView(), (r => [r.left, r.top, r.width, r.height])(el.getBoundingClientRect())))"
                 "(document.querySelector('svg.chart'))})")
        state = json.loads(cdp.send("Runtime.evaluate", {"expression": probe, "returnByValue": True}, session=s)["result"]["value"])
        x, y, w, h = state["box"]
        cdp.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x + w * 0.6, "y": y + h * 0.6}, session=s)
        tip = cdp.send("Runtime.evaluate", {"expression": "document.getElementById('tip').hidden + '|' + "
                                            "document.getElementById('tip').textContent", "returnByValue": True},
                       session=s)["result"]["value"]
        # Control: the same page with a script smuggled in must be refused, and the refusal must be caught
        # by the error collection above (so "no problems" is not vacuous).
        first = len(cdp.events)
        tampered = tmp_path / "tampered.html"
        tampered.write_text(page.read_text().replace("<main>", "<main><script>document.title='pwned'</script>", 1))
        cdp.send("Page.navigate", {"url": tampered.as_uri()}, session=s)
        cdp.wait_for("Page.loadEventFired", since=first)
        tampered_title = cdp.send("Runtime.evaluate", {"expression": "document.title", "returnByValue": True},
                                  session=s)["result"]["value"]
    finally:
        cdp.close()
    mine = [m for m in cdp.events[:first] if m.get("sessionId") == s]
    problems = [m for m in mine if is_problem(m)]
    assert not problems, json.dumps(problems, indent=1)[:2000]
    assert tampered_title != "pwned" and any(is_problem(m) for m in cdp.events[first:])
    fetched = [m["params"]["request"]["url"] for m in mine if m["method"] == "Network.requestWillBeSent"]
    assert all(u.startswith(("file:", "data:")) for u in fetched), fetched  # nothing from a network
    assert state["ready"] == "1" and state["title"] != "pwned"
    assert state["charts"] == 8  # 2 success/accuracy + 3 diagnostics + 3 roles' lengths
    assert state["lines"] >= 2 * 2 + 3 * 6, state  # every run's curves and every (run, role) line
    assert tip.startswith("false|step "), tip  # the hover read-out works

    # (b) the screenshot shows the plots
    png = tmp_path / "report.png"
    subprocess.run([CHROMIUM, *chromium_flags(tmp_path / "profile2"), f"--screenshot={png}", "--window-size=1200,2400",
                    url], check=True, timeout=60, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    width, height, colours = png_pixels(png)
    assert (width, height) == (1200, 2400)
    assert len(colours) > 200, len(colours)  # a blank page has one; anti-aliased lines and text have hundreds
    assert (0x1F, 0x77, 0xB4) in colours and (0xD6, 0x27, 0x28) in colours  # both runs' line colours
    if os.environ.get("ROLECALL_REPORT_PNG"):
        shutil.copy(png, os.environ["ROLECALL_REPORT_PNG"])


def test_sparse_and_all_nan_runs_still_render(tmp_path):
    d = tmp_path / "fresh"
    d.mkdir()
    (d / "metrics.jsonl").write_text('{"step": 0, "val/accuracy": 0.5}\n')
    page = build_page([load_run(d)])
    assert "No completion-length metrics were logged." in page and "No alarms were raised." in page
    assert page.count(">not logged</text>") >= 4  # training success + the three diagnostics
    nan = tmp_path / "nan"
    nan.mkdir()
    (nan / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "reward/mean": float("nan"), "role/a/chi2_token": float("inf"), "role/a/len_p50": None}) + "\n"
        for s in range(1, 4)))
    page = build_page([load_run(d), load_run(nan)])
    assert not re.search(r'="[^"]*\b(nan|inf)\b', page, re.I)  # no NaN leaks into SVG coordinates
    assert "a: completion length" not in page


def test_length_falls_back_to_mean_completion_len(tmp_path):
    d = tmp_path / "r"
    d.mkdir()
    (d / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "role/a/completion_len": 10.0 * s}) + "\n" for s in (1, 2)))
    page = build_page([load_run(d)])
    assert "a: completion length" in page and "<title>mean</title>" in page


def test_the_summary_names_the_code_that_wrote_each_run(tmp_path):
    """One run resumed on other code, one from a wheel (no commit), one from before the event."""
    def run(name, sittings):
        d = tmp_path / name
        d.mkdir()
        rows = [{"step": 0, "val/accuracy": 0.5}, {"step": 1, "reward/mean": 0.5}]
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        if sittings:
            (d / "sittings.jsonl").write_text("".join(json.dumps({"step": s, "rolecall": "0.1.0", "commit": c,
                                                                 "dirty": dirty}) + "\n" for s, c, dirty in sittings))
        (d / "config.yaml").write_text(yaml.safe_dump({"workflow": {"name": "debate"}}))
        return load_run(d)

    page = build_page([run("resumed", [(0, "a" * 40, False), (5, "a" * 40, False), (9, "b" * 40, True)]),
                       run("wheel", [(0, None, None)]), run("old", [])])
    rows = re.findall(r"<tr><td><span class=\"swatch\".*?</tr>", page)
    assert [re.findall(r"<td>([^<]*)</td></tr>", r)[0] for r in rows] == [
        "aaaaaaa, bbbbbbb+ from step 9", "rolecall 0.1.0", "—"]


def test_validation_points_carry_their_error_bars(tmp_path):
    """± 1.96·se around each validation point that logged val/accuracy_se, cut to [0, 1], and in the hover."""
    from rolecall.report.html import accuracy_error

    d = tmp_path / "r"
    d.mkdir()
    rows = [{"step": 0, "val/accuracy": 0.5, "val/n": 8, "val/accuracy_se": 0.1768},
            {"step": 1, "reward/mean": 0.5},
            {"step": 2, "val/accuracy": 0.95, "val/n": 8, "val/accuracy_se": 0.05},
            {"step": 4, "val/accuracy": 0.4}]  # an older row: no error, no bar
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = load_run(d)
    err = accuracy_error(run, *run.series("val/accuracy"))
    # 1.96 x 0.1768 = 0.3465 either side of 0.5; 1.96 x 0.05 = 0.098 above 0.95 is cut at 1
    lo, hi = err["bars"]
    assert [round(v, 4) for v in lo[:2]] == [0.1535, 0.852] and [round(v, 4) for v in hi[:2]] == [0.8465, 1.0]
    assert math.isnan(lo[2]) and math.isnan(hi[2])
    assert err["notes"] == ["± 0.347 (1.96·se)", "± 0.098 (1.96·se)", ""]
    page = build_page([run])
    assert page.count('class="errbar"') == 1 and "± 0.347 (1.96·se)" in page
    # a run that never logged the error draws and says nothing more
    (d / "metrics.jsonl").write_text("".join(json.dumps({k: v for k, v in r.items() if k != "val/accuracy_se"}) + "\n"
                                             for r in rows))
    page = build_page([load_run(d)])
    assert 'class="errbar"' not in page and "1.96·se)" not in page and '"notes"' not in page
