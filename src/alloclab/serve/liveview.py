"""`alloclab run --serve`: a read-only web page that follows a run while it goes on.

A companion process (process/companion.py says why not a thread): alloclab binds the socket, then
`python -m alloclab.serve.liveview` serves it from its own read-only connection to the store (it sees
every committed interval); the analysis it runs for the warnings would otherwise hold alloclab's GIL
for seconds between sampling ticks.

Endpoints: / (the page), /plotly.min.js (served from the installed plotly package: the page needs no
network), /api/state (run, groups, replicas' current levels, events), /api/series?since=T (samples
after T), /api/warnings (the analysis' warnings so far, recomputed at most every WARNINGS_EVERY_S).
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from ..common.errors import UserError
from ..common.rootfs import Root
from ..process.companion import Companion, become_companion, companion_args
from .httpguard import serve_on_fd

WARNINGS_EVERY_S = 15.0
EVENTS_SHOWN = 100


# ---- in alloclab: address, socket, the server process ----------------------------------------------


def parse_address(text: str, public: bool = False) -> tuple[str, int]:
    """'PORT', 'ADDR:PORT' or '[V6ADDR]:PORT' -> (address, port); loopback unless `public`."""
    text = text.strip()
    if text.startswith("["):
        addr, _, port = text[1:].partition("]:")
    elif text.count(":") == 1:
        addr, port = text.split(":")
    elif ":" not in text:
        addr, port = "127.0.0.1", text
    else:
        addr, port = "", ""
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UserError(
            f"--serve {text!r} is not [ADDR:]PORT", "e.g. --serve 8765 or --serve 127.0.0.1:8765 (0: any free port)"
        )
    addr = addr or "127.0.0.1"
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        raise UserError(
            f"--serve address {addr!r} is not an IP address", "give a numeric address, e.g. 127.0.0.1"
        ) from None
    if not ip.is_loopback and not public:
        raise UserError(
            f"--serve {addr} is not a loopback address: the page shows the run's commands and data",
            "serve on 127.0.0.1 (and forward it, e.g. ssh -L), or add --serve-public",
        )
    return str(ip), int(port)


class LiveServer(Companion):
    """The live view's server process, started for one run and stopped with it."""

    def __init__(self, address: tuple[str, int], public: bool = False):
        """Bind and listen now (a busy port is refused before anything else is made); `start` later."""
        self.public = public
        super().__init__(address, "the live view", "choose another port with --serve (0 picks a free one)")

    def start(self, db: Path, log: Path) -> subprocess.Popen:
        return super().start("alloclab.serve.liveview", db, log, ["--any-host"] if self.public else [])


# ---- in the server process ---------------------------------------------------------------------------


class LiveData:
    """Everything the page shows, read from the store through its API (one connection, one lock)."""

    def __init__(self, db: Path):
        from ..store import Store

        self.db = db
        self.store = Store.open_readonly(db)
        self.lock = threading.Lock()
        self.analysis_store = Store.open_readonly(db)
        self.analysis_lock = threading.Lock()
        self.warnings: dict = {"computed_at": None, "warnings": [], "note": "not analysed yet"}
        self.analysed_at_sample: float | None = None
        self.analysed_mono = -WARNINGS_EVERY_S

    @staticmethod
    def _metric(meta: dict) -> tuple[str, str]:
        # the samples column of a metric is "<metric>_kb" (analysis.load.METRIC_COLUMN); not imported
        # from there: the analysis package loads scipy, seconds the first page should not wait for
        metric = meta.get("metric", "rss")
        return metric, f"{metric}_kb"

    def state(self) -> dict:
        with self.lock:
            meta = self.store.meta()
            metric, col = self._metric(meta)
            latest = self.store.latest_sample_values(col)
            groups = self.store.groups()
            reps = self.store.replicas()
            events = self.store.events(exclude=("verify",))[-EVENTS_SHOWN:]
        replicas = []
        for r in reps:
            t, kb = latest.get(r["id"], (None, None))
            replicas.append(
                {
                    "name": r["name"],
                    "group": r["group"],
                    "started_at": r["started_at"],
                    "ended_at": r["ended_at"],
                    "exit_code": r["exit_code"],
                    "end_kind": r["end_kind"],
                    "verified": r["verified"],
                    "last_t": t,
                    "last_mb": None if kb is None else kb / 1024,
                }
            )
        by_group = {}
        for g in groups:
            vals = sorted(x["last_mb"] for x in replicas if x["group"] == g["name"] and x["last_mb"] is not None)
            by_group[g["name"]] = vals[(len(vals) - 1) // 2] if vals else None  # lower median: a real replica's level
        phases = json.loads(meta["phases"]) if meta.get("phases") else None
        started, ended = _num(meta.get("started_at")), _num(meta.get("ended_at"))
        report = self.store.run_dir / "report.html"
        return {
            "name": meta.get("name"),
            "metric": metric,
            "started_at": started,
            **run_clock(phases, started, ended, time.time()),
            "report": "/report.html" if ended is not None and report.is_file() else None,
            "report_path": str(report) if ended is not None and report.is_file() else None,
            "ended_at": _num(meta.get("ended_at")),
            "end_reason": meta.get("end_reason"),
            "interval": _num(meta.get("interval")),
            "phases": phases,
            "host": meta.get("host"),
            "now": time.time(),
            "last_sample": max((x["last_t"] for x in replicas if x["last_t"] is not None), default=None),
            "groups": [
                {
                    "name": g["name"],
                    "allocator": g["family"] or g["allocator"],
                    "version": g["version"],
                    "baseline": bool(g["is_baseline"]),
                    "median_mb": by_group[g["name"]],
                }
                for g in groups
            ],
            "replicas": replicas,
            "events": [
                {"t": e["t"], "kind": e["kind"], "group": e["group_name"], "text": e["description"]} for e in events
            ],
        }

    def series(self, since: float) -> dict:
        with self.lock:
            meta = self.store.meta()
            metric, col = self._metric(meta)
            names = {r["id"]: r["name"] for r in self.store.replicas()}
            rows = self.store.samples_since(since, col)
        out: dict[str, dict[str, list]] = {}
        for rid, t, kb in rows:
            s = out.setdefault(names.get(rid, str(rid)), {"t": [], "mb": []})
            s["t"].append(t)
            s["mb"].append(None if kb is None else kb / 1024)
        return {"metric": metric, "until": rows[-1][1] if rows else since, "series": out}

    def analysed_warnings(self) -> dict:
        """The analysis' warnings over the data so far; recomputed when there are new samples and
        WARNINGS_EVERY_S has passed (the analysis takes seconds on a long run). It has its own
        connection and lock, so state and series answer while it runs; meanwhile the last result is served."""
        if not self.analysis_lock.acquire(blocking=False):
            return self.warnings
        try:
            last = self.analysis_store.last_sample_time()
            if (
                last is None
                or last == self.analysed_at_sample
                or time.monotonic() - self.analysed_mono < WARNINGS_EVERY_S
            ):
                return self.warnings
            from ..analysis import analyse

            self.analysed_mono, self.analysed_at_sample = time.monotonic(), last
            try:
                a = analyse(self.analysis_store)
                ended = self.analysis_store.meta().get("ended_at")
                # "too short: run longer" is a verdict on the finished run: while it goes on, replicas
                # simply have not had their load yet (issue 27: the warning 18 s into a 76 s run)
                shown = [w for w in a.warnings if ended or w.kind not in WHEN_ENDED]
                self.warnings = {
                    "computed_at": time.time(),
                    "up_to": last,
                    "note": None if ended else f"judged when the run ends: {', '.join(WHEN_ENDED)}",
                    "warnings": [w.as_dict() for w in shown],
                }
            except Exception as exc:  # partial data the analysis cannot use yet: say so, keep serving
                self.warnings = {
                    "computed_at": time.time(),
                    "up_to": last,
                    "warnings": self.warnings["warnings"],
                    "note": f"analysis not available yet: {type(exc).__name__}: {exc}",
                }
            return self.warnings
        finally:
            self.analysis_lock.release()


WHEN_ENDED = ("too-short",)  # warnings held back while the run goes on


def run_clock(phases: dict | None, started: float | None, ended: float | None, now: float) -> dict:
    """The run's phase, seconds elapsed, planned length and time left (also in the phase), for the
    page's status line and its phase lines; after the end: phase "ended", nothing left."""
    out = {
        "phase": "ended" if ended is not None else None,
        "elapsed_s": None,
        "planned_s": None,
        "left_s": None,
        "phase_left_s": None,
        "phase_starts": [],
    }
    if not phases or started is None:
        return out
    warm, load, idle = (float(phases.get(k) or 0) for k in ("warmup", "load", "idle"))
    load_set = phases.get("load") is not None
    out["phase_starts"] = [
        x for x in ([("load", warm)] if warm else []) + ([("idle", warm + load)] if idle and load_set else [])
    ]
    elapsed = (ended if ended is not None else now) - started
    out["elapsed_s"] = max(0.0, elapsed)
    if load_set:
        out["planned_s"] = warm + load + idle
    if ended is not None:
        return out
    bounds = [
        ("warmup", warm),
        ("load", warm + load if load_set else None),
        ("idle", warm + load + idle if load_set else None),
    ]
    for name, end in bounds:
        if end is None or elapsed < end:
            out["phase"] = name
            out["phase_left_s"] = None if end is None else end - elapsed
            break
    else:
        out["phase"] = "stopping"
    if out["planned_s"] is not None:
        out["left_s"] = max(0.0, out["planned_s"] - elapsed)
    return out


def _num(v) -> float | None:
    try:
        return float(v) if v not in (None, "") else None
    except ValueError:
        return None


def _page() -> bytes:
    return (Path(__file__).parent.parent / "data" / "liveview.html").read_bytes()


def _plotly_js() -> bytes:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs().encode()


def make_handler(data: LiveData) -> type[BaseHTTPRequestHandler]:
    cache: dict[str, bytes] = {}

    class Handler(BaseHTTPRequestHandler):
        server_version = "alloclab-live"

        def log_message(self, fmt, *args) -> None:  # quiet: the log is for errors
            pass

        def _send(self, body: bytes, ctype: str, status: int = 200, csp: str | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header(
                "Content-Security-Policy",
                csp
                or "default-src 'self'; style-src 'self' 'unsafe-inline'; "
                "script-src 'self' 'unsafe-inline' 'unsafe-eval'; connect-src 'self'; img-src 'self' data:",
            )
            self.end_headers()
            self.wfile.write(body)

        def _json(self, obj, status: int = 200) -> None:
            self._send(json.dumps(obj, default=str).encode(), "application/json", status)

        def do_GET(self) -> None:
            url = urlparse(self.path)  # the Host header is checked by the server (httpguard)
            try:
                if url.path in ("/", "/index.html"):
                    self._send(cache.setdefault("page", _page()), "text/html; charset=utf-8")
                elif url.path == "/plotly.min.js":
                    if "js" not in cache:
                        cache["js"] = _plotly_js()
                    self._send(cache["js"], "application/javascript; charset=utf-8")
                elif url.path == "/api/state":
                    self._json(data.state())
                elif url.path == "/api/series":
                    since = parse_qs(url.query).get("since", ["-inf"])[0]
                    try:
                        t = float(since)
                    except ValueError:
                        return self._json({"error": "since must be a number (Unix seconds)"}, 400)
                    self._json(data.series(t))
                elif url.path == "/api/warnings":
                    self._json(data.analysed_warnings())
                elif url.path == "/report.html":
                    run_dir = data.store.run_dir
                    try:  # never through a link planted in the run directory (docs/reference/security.md)
                        body = Root(run_dir, "the run directory").read_bytes(run_dir / "report.html", one_link=True)
                    except FileNotFoundError:
                        return self._json({"error": "no report yet"}, 404)
                    except UserError as err:
                        return self._json({"error": err.problem}, 403)
                    # the report is self-contained: inline scripts and styles, nothing fetched
                    self._send(
                        body,
                        "text/html; charset=utf-8",
                        csp="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline' "
                        "'unsafe-eval'; img-src data:",
                    )
                else:
                    self._json({"error": "not found"}, 404)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def do_POST(self) -> None:  # read-only
            self._json({"error": "the live view is read-only"}, 405)

        do_PUT = do_DELETE = do_PATCH = do_POST

    return Handler


def serve(fd: int, db: Path, parent: int, any_host: bool = False) -> None:
    become_companion(parent)
    data = LiveData(db)
    # load the analysis (scipy: seconds) before the first /api/warnings asks for it
    threading.Thread(target=lambda: __import__("alloclab.analysis"), daemon=True).start()
    serve_on_fd(fd, make_handler(data), check_host=not any_host)


def main() -> None:
    ap = companion_args("alloclab's live view server (started by `alloclab run --serve`).")
    ap.add_argument("--any-host", action="store_true", help="answer whatever Host the request names (--serve-public)")
    args = ap.parse_args()
    serve(args.fd, args.db, args.parent, args.any_host)


if __name__ == "__main__":
    main()
