"""Fuzz campaigns over the surfaces of issue 30, through the real CLI in child processes:

    PYTHONPATH=src .venv/bin/python benchmarks/fuzz_hostile.py stores  [--count 200] [--seed 1]
    PYTHONPATH=src .venv/bin/python benchmarks/fuzz_hostile.py roots   [--count 100] [--seed 1]
    PYTHONPATH=src .venv/bin/python benchmarks/fuzz_hostile.py loader  [--count 300] [--seed 1]
    PYTHONPATH=src .venv/bin/python benchmarks/fuzz_hostile.py links   [--count 60] [--seed 1]
    PYTHONPATH=src .venv/bin/python benchmarks/fuzz_hostile.py facts   [--count 100] [--seed 1]
    PYTHONPATH=src .venv/bin/python benchmarks/fuzz_hostile.py servers [--count 100] [--seed 1]
    PYTHONPATH=src .venv/bin/python benchmarks/fuzz_hostile.py starve  [--count 32]

- stores: a real store (`alloclab import torutils` of tests/data) damaged at random (pages
  zeroed or filled with noise, the file cut, a table dropped, a cell set to 1e300, -1e300, 2^63-1,
  text, NULL), then `report`, `compare`, `export` and `bundle` on it. Must end in exit 0 or in one
  line with exit 2/3; never a traceback, a hang, or a change to the store; peak RSS recorded.
- roots: a fleet --root with one running stand-in unit, symbolic links planted at random places
  (UNIT.d, the drop-in, temporary names, each level of the state directory, the generation's
  backup directory, the manifest, the stand-in's pid directory) pointing outside the root, then
  `fleet apply` and `fleet rollback`. Must end in exit 0 or one line with exit 2, and no file
  outside the root may be created or changed.
- loader: random group envs of loader variables (LD_*, GCONV_PATH, LOCPATH, ... with entries
  that are trusted, world-writable, sticky, owned by nobody, missing, relative, empty, $ORIGIN,
  links) through `alloclab check`. Every env accepted is checked against an independent oracle
  (realpath of each entry, every ancestor owned by root or us and not group/world-writable unless
  sticky); must never accept what the oracle refuses, never a traceback.

- links (issue 46): a run whose report files, charts, `charts/` itself or the store's trace path
  (`groups.command_json`) are links (symbolic or hard) to a secret file or a directory outside the
  run, then `report` or `bundle`. Counted: the secret's bytes in a bundle, any file outside the
  run created or changed, a bundle readable by others.
- facts (issue 46): valid `fleet facts --json` documents mutated at random (a unit twice, numbers
  as strings, NaN, null, missing keys, wrong sandbox types, deep nesting, huge numbers) through
  `fleet plan --facts`. Must be exit 0 or one line with exit 2; exit 70 (internal error) counted.
- servers (issue 46): `run --metrics` and `run --serve` beside a sleeping replica, then hostile
  requests against both (random Host names, oversized and garbage request lines) and 200 idle
  connections each. Counted: answers with data to a non-loopback Host, connections held past the
  cap, connections still open after the idle timeout.

- starve (issue 46): `run` of COUNT CPU-bound replicas (a shell busy loop), alloclab and its
  replicas pinned to one CPU (`taskset -c 0`), interval 0.5 s, 6 s of load. Counted: wall time,
  ticks recorded (samples of the best-sampled replica) against the 13 planned, the first sample's
  delay, and whether `ticks_skipped` was recorded.

Each prints a JSON summary (counts by outcome); figures go in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data" / "1aeo-torutils" / "co-guard-2025-09"
# ALLOCLAB_FUZZ_SRC: another tree, for a "before" figure; ALLOCLAB_DEBUG: a fault in alloclab shows its
# traceback, which is what is counted
ENV = {**os.environ, "PYTHONPATH": os.environ.get("ALLOCLAB_FUZZ_SRC", str(REPO / "src")), "ALLOCLAB_DEBUG": "1"}


def cli(args: list[str], timeout: float, cwd: Path | None = None) -> dict:
    """One alloclab command: exit code (or 'hang'), stderr, peak RSS (MB), seconds."""
    started = time.monotonic()
    p = subprocess.Popen(
        [sys.executable, "-m", "alloclab", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        env=ENV,
        cwd=cwd,
        start_new_session=True,
    )
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            err = p.stderr.read()
            return {
                "code": os.waitstatus_to_exitcode(status),
                "stderr": err,
                "rss_mb": usage.ru_maxrss / 1024,
                "seconds": time.monotonic() - started,
            }
        if time.monotonic() - started > timeout:
            os.killpg(p.pid, 9)
            p.wait()
            return {"code": "hang", "stderr": "", "rss_mb": 0.0, "seconds": timeout}
        time.sleep(0.02)


def judge(r: dict, allowed=(0, 2, 3)) -> list[str]:
    problems = []
    if r["code"] == "hang":
        problems.append("hang")
    elif "Traceback" in r["stderr"]:
        problems.append("traceback")
    elif r["code"] not in allowed:
        problems.append(f"exit {r['code']}")
    elif r["code"] != 0 and len([ln for ln in r["stderr"].splitlines() if ln.strip()]) != 1:
        problems.append("not one line")
    return problems


def digest(d: Path) -> dict[str, str]:
    out = {}
    for p in sorted(d.rglob("*")):
        if p.is_symlink():
            out[str(p)] = "link->" + os.readlink(p)
        elif p.is_file():
            out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
        elif p.is_dir():
            out[str(p)] = "dir"
    return out


# ---- stores ---------------------------------------------------------------------------------------

TABLES = ["meta", "groups", "replicas", "processes", "samples", "events", "host_samples", "memberships"]
VALUES = [1e300, -1e300, 2**63 - 1, "x" * 10, None, float("inf")]


def damage_store(db: Path, rng: random.Random) -> str:
    kind = rng.choice(["zero-page", "noise-page", "cut", "drop-table", "absurd-cell", "absurd-time", "delete-rows"])
    if kind in ("zero-page", "noise-page", "cut"):
        size = db.stat().st_size
        page = 4096
        n = rng.randrange(size // page)
        with open(db, "r+b") as f:
            if kind == "cut":
                f.truncate(rng.randrange(size))
            else:
                f.seek(n * page)
                f.write(b"\0" * page if kind == "zero-page" else rng.randbytes(page))
        return f"{kind} {n}"
    conn = sqlite3.connect(db)
    table = rng.choice(TABLES)
    if kind == "drop-table":
        conn.execute(f"DROP TABLE IF EXISTS {table}")
    elif kind == "delete-rows":
        conn.execute(f"DELETE FROM {table} WHERE rowid % 2 = 0")
    else:
        if kind == "absurd-time":
            table = rng.choice(["samples", "events", "host_samples"])
        cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
        col = "t" if kind == "absurd-time" and "t" in cols else rng.choice(cols)
        value = rng.choice(VALUES)
        rowids = [r[0] for r in conn.execute(f"SELECT rowid FROM {table} ORDER BY rowid")]
        for rowid in rng.sample(rowids, min(3, len(rowids))):
            conn.execute(f"UPDATE OR IGNORE {table} SET {col} = ? WHERE rowid = ?", (value, rowid))
        kind = f"{kind} {table}.{col}={value!r}"[:80]
    conn.commit()
    conn.close()
    return kind if not kind.startswith(("drop", "delete")) else f"{kind} {table}"


def workdir(campaign: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"alloclab-fuzz-{campaign}-{os.getpid()}-"))


def imported_run(campaign: str) -> tuple[Path, Path]:
    """A fresh work directory and a real store in it (`import torutils` of tests/data)."""
    work = workdir(campaign)
    intact = work / "intact"
    r = cli(["import", "torutils", str(DATA), "-o", str(intact)], 300)
    assert r["code"] == 0, r["stderr"]
    return work, intact


def stores(args) -> dict:
    rng = random.Random(args.seed)
    work, intact = imported_run("stores")
    results, worst = [], 0.0
    for i in range(args.count):
        run = work / f"case-{i}"
        shutil.copytree(intact, run, ignore=shutil.ignore_patterns("report*", "summary*", "charts", "*.csv"))
        what = damage_store(run / "run.db", rng)
        before = hashlib.sha256((run / "run.db").read_bytes()).hexdigest()
        cmd = rng.choice(["report", "compare", "export", "bundle"])
        argv = {
            "report": ["report", str(run)],
            "compare": ["compare", str(intact), str(run)],
            "export": ["export", str(run), "--csv", str(work / f"csv-{i}")],
            "bundle": ["bundle", str(run), "-o", str(work / f"b-{i}.tar.gz")],
        }[cmd]
        out = cli(argv, args.timeout)
        problems = judge(out)
        if cmd != "report" and hashlib.sha256((run / "run.db").read_bytes()).hexdigest() != before:
            problems.append("store changed")
        worst = max(worst, out["rss_mb"])
        results.append(
            {
                "case": i,
                "damage": what,
                "cmd": cmd,
                "code": out["code"],
                "problems": problems,
                "rss_mb": round(out["rss_mb"]),
                "line": out["stderr"].strip().splitlines()[-1][:200] if out["stderr"].strip() else "",
            }
        )
        shutil.rmtree(run, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    return summarize(results, {"peak_rss_mb": round(worst)})


# ---- roots ----------------------------------------------------------------------------------------

LINK_PLACES = [
    "etc/systemd/system/svc.service.d",
    "etc/systemd/system/svc.service.d/50-alloclab.conf",
    "etc/systemd/system/svc.service.d/50-alloclab.tmp",
    "etc/systemd/system/svc.service.d/50-alloclab.conf.tmp",
    "var",
    "var/lib",
    "var/lib/alloclab",
    "var/lib/alloclab/fleet",
    "var/lib/alloclab/fleet/applied",
    "run/alloclab-units",
    "run/alloclab-units/svc.service.pid",
]


def roots(args) -> dict:
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix=f"alloclab-fuzz-roots-{os.getpid()}-"))
    groups = work / "groups.toml"
    groups.write_text('name = "g"\ncommand = ["/bin/true"]\n[[group]]\nname = "glibc"\nallocator = "glibc"\n')
    results = []
    for i in range(args.count):
        case = work / f"case-{i}"
        root, outside = case / "root", case / "outside"
        (root / "etc/systemd/system").mkdir(parents=True)
        (root / "etc/systemd/system/svc.service").write_text("[Service]\nExecStart=/bin/sleep 600\n")
        outside.mkdir()
        (outside / "victim").write_text("precious\n")
        (outside / "dir").mkdir()
        plan = case / "plan.json"
        r = cli(
            [
                "fleet",
                "plan",
                "--units",
                "svc",
                "--groups",
                str(groups),
                "-o",
                str(plan),
                "--root",
                str(root),
                "--systemctl",
                "local",
            ],
            args.timeout,
        )
        planted = rng.sample(LINK_PLACES, rng.randint(1, 3))
        for place in sorted(planted, key=len):
            link = root / place
            if link.exists() or link.is_symlink():
                continue
            link.parent.mkdir(parents=True, exist_ok=True) if not any(
                p.is_symlink() for p in [link.parent, *link.parent.parents]
            ) else None
            try:
                link.symlink_to(rng.choice([outside / "victim", outside / "dir", outside / "new"]))
            except OSError:
                pass
        before = digest(outside)
        outs = [r]
        for step in (
            ["fleet", "apply", str(plan), "--root", str(root), "--systemctl", "local", "--batch", "1"],
            ["fleet", "rollback", "--root", str(root), "--systemctl", "local"],
        ):
            outs.append(cli(step, args.timeout))
        problems = [p for o in outs for p in judge(o, (0, 2))]
        after = digest(outside)
        if after != before:
            problems.append("file outside --root written")
        # end the stand-in unit, wherever its pid file went
        for pidfile in list(root.rglob("*.pid")) + list(outside.rglob("*.pid")):
            try:
                os.killpg(int(pidfile.read_text().split()[0]), 9)
            except (OSError, ValueError):
                pass
        results.append(
            {
                "case": i,
                "planted": planted,
                "codes": [o["code"] for o in outs],
                "problems": problems,
                "code": outs[1]["code"],
                "line": (outs[1]["stderr"].strip().splitlines() or [""])[-1][:200],
            }
        )
    shutil.rmtree(work, ignore_errors=True)
    return summarize(results, {})


# ---- loader variables --------------------------------------------------------------------------------


def _trusted_chain(path: str, directory: bool) -> bool:
    """The oracle: the entry's real path and every ancestor owned by root or us, not writable by
    group or others unless sticky (directories); every link on the way owned by root or us."""
    if not path.startswith("/"):
        return False
    trusted = {0, os.geteuid()}
    # every link on the way, as given
    p = Path(path)
    for anc in [p, *p.parents]:
        try:
            st = os.lstat(anc)
        except OSError:
            return False
        if stat.S_ISLNK(st.st_mode) and st.st_uid not in trusted:
            return False
    real = Path(os.path.realpath(path))
    for i, anc in enumerate([real, *real.parents]):
        try:
            st = os.stat(anc)
        except OSError:
            return False
        if st.st_uid not in trusted:
            return False
        if i == 0 and (stat.S_ISDIR(st.st_mode) != directory):
            return False
        if st.st_mode & 0o022 and not (stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX):
            return False
    return True


def loader(args) -> dict:
    sys.path.insert(0, str(REPO / "src"))
    from alloclab.allocators import loaderenv  # the variable names; the checks run in the CLI under test

    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix=f"alloclab-fuzz-loader-{os.getpid()}-"))
    os.chmod(work, 0o755)
    for name, mode, owner in [
        ("ok", 0o755, None),
        ("ww", 0o777, None),
        ("gw", 0o775, None),
        ("sticky", 0o1777, None),
        ("nobody", 0o755, 65534),
        ("okchild", 0o755, None),
    ]:
        d = work / name
        d.mkdir()
        os.chmod(d, mode)
        if owner is not None:
            os.chown(d, owner, -1)
        (d / "lib.so").write_bytes(b"\x7fELF")
        if name == "nobody":
            os.chown(d / "lib.so", 65534, -1)
    (work / "sticky" / "inner").mkdir()
    (work / "ww" / "inner").mkdir()
    (work / "link-ok").symlink_to(work / "ok")
    (work / "link-ww").symlink_to(work / "ww")
    entries = [
        str(work / n) for n in ("ok", "ww", "gw", "sticky", "nobody", "sticky/inner", "ww/inner", "link-ok", "link-ww")
    ] + [
        "/usr/lib",
        "/lib",
        "/nonexistent-alloclab",
        "relative/lib",
        "$ORIGIN/lib",
        "",
        "/tmp",
        str(work / "ok" / "lib.so"),
    ]
    files = [str(work / n / "lib.so") for n in ("ok", "ww", "nobody", "sticky", "link-ok")] + [
        "/lib/x86_64-linux-gnu/libc.so.6"
    ]
    names = (
        list(loaderenv.LOADED_FROM)
        + sorted(loaderenv.REFUSED)
        + sorted(loaderenv.HARMLESS_LD)[:3]
        + ["LD_FANCY", "MALLOC_ARENA_MAX"]
    )
    results = []
    for i in range(args.count):
        env = {}
        for _ in range(rng.randint(1, 3)):
            name = rng.choice(names)
            kind = loaderenv.LOADED_FROM.get(name, ("dirs", ":"))[0]
            pool = files if kind == "files" else entries
            env[name] = ":".join(rng.choice(pool) for _ in range(rng.randint(1, 3)))
        exp = work / f"exp-{i}.toml"
        table = ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())
        exp.write_text(
            f'name = "l"\ncommand = ["/bin/true"]\n[[group]]\nname = "a"\nallocator = "glibc"\nenv = {{ {table} }}\n'
        )
        out = cli(["check", str(exp)], args.timeout)
        problems = judge(out, (0, 2))
        if out["code"] == 0:  # accepted: the oracle must agree for every loader variable
            for k, v in env.items():
                if k in loaderenv.HARMLESS_LD or not loaderenv.affects_loading(k):
                    continue
                if k not in loaderenv.LOADED_FROM:
                    problems.append(f"accepted {k}")
                    continue
                kind, seps = loaderenv.LOADED_FROM[k]
                parts = [v] if not seps else __import__("re").split(f"[{seps}]", v)
                if not all(p and "$" not in p and _trusted_chain(p, kind == "dirs") for p in parts):
                    problems.append(f"accepted {k}={v} that the oracle refuses")
        results.append(
            {
                "case": i,
                "env": env,
                "code": out["code"],
                "problems": problems,
                "line": (out["stderr"].strip().splitlines() or [""])[-1][:200],
            }
        )
    shutil.rmtree(work, ignore_errors=True)
    return summarize(results, {})


# ---- links (issue 46) -------------------------------------------------------------------------------

SECRET = b"root:$6$fuzz-secret-marker:19000:0:99999:7:::\n"
LINK_TARGETS = [
    "report.md",
    "report.html",
    "summary.json",
    "summary.csv",
    "replicas.csv",
    "charts",
    "charts/timeseries.png",
    "charts/distribution.png",
]


def links(args) -> dict:
    rng = random.Random(args.seed)
    work, intact = imported_run("links")
    outside = work / "outside"
    outside.mkdir()
    secret = outside / "shadow"
    secret.write_bytes(SECRET)
    secret.chmod(0o600)
    (outside / "dir").mkdir()
    results = []
    for i in range(args.count):
        run = work / f"case-{i}"
        shutil.copytree(intact, run, symlinks=True)
        planted = []
        for place in rng.sample(LINK_TARGETS + ["trace"], rng.randint(1, 3)):
            if place == "trace":  # the store names the secret as the trace it replayed
                conn = sqlite3.connect(run / "run.db")
                conn.execute("UPDATE groups SET command_json = ?", (json.dumps(["/x/replay", str(secret)]),))
                conn.commit()
                conn.close()
                planted.append("trace")
                continue
            p = run / place
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink(missing_ok=True)
            p.parent.mkdir(exist_ok=True)
            kind = "dir" if place == "charts" else rng.choice(["symlink", "hardlink", "dangling"])
            if kind == "dir":
                p.symlink_to(outside / "dir")
            elif kind == "symlink":
                p.symlink_to(secret)
            elif kind == "hardlink":
                os.link(secret, p)
            else:
                p.symlink_to(outside / f"new-{i}")
            planted.append(f"{place}:{kind}")
        before = digest(outside)
        cmd = rng.choice(["report", "bundle"])
        bundle = work / f"b-{i}.tar.gz"
        out = cli(["report", str(run)] if cmd == "report" else ["bundle", str(run), "-o", str(bundle)], args.timeout)
        problems = judge(out)
        if digest(outside) != before:
            problems.append("outside changed")
        if bundle.exists():
            import tarfile

            with tarfile.open(bundle) as tar:
                if any(SECRET in tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()):
                    problems.append("secret archived")
            if bundle.stat().st_mode & 0o007:
                problems.append("bundle readable by others")
            bundle.unlink()
        results.append(
            {
                "case": i,
                "planted": planted,
                "cmd": cmd,
                "code": out["code"],
                "problems": problems,
                "line": (out["stderr"].strip().splitlines() or [""])[-1][:200],
            }
        )
        shutil.rmtree(run, ignore_errors=True)
        shutil.rmtree(outside)  # as it was, for the next case (a "before" tree overwrites it)
        outside.mkdir()
        secret.write_bytes(SECRET)
        secret.chmod(0o600)
        (outside / "dir").mkdir()
    shutil.rmtree(work, ignore_errors=True)
    return summarize(
        results,
        {
            "secret_archived": sum("secret archived" in r["problems"] for r in results),
            "outside_changed": sum("outside changed" in r["problems"] for r in results),
        },
    )


# ---- facts (issue 46) -------------------------------------------------------------------------------


def _good_facts(host: str, n: int) -> dict:
    return {
        "version": 1,
        "kind": "alloclab-fleet-facts",
        "host": host,
        "pattern": "tor@*",
        "root": "/",
        "collected": 1.0,
        "units": [
            {
                "unit": f"tor@{i}.service",
                "memory_kb": 30_000 + i,
                "uptime_s": 60.0 * i,
                "main_pid": 100 + i,
                "sandbox": {
                    "user": "root",
                    "protect_home": "no",
                    "protect_system": "full",
                    "private_tmp": True,
                    "inaccessible": [],
                    "temporary": [],
                    "root_directory": "",
                    "dynamic_user": False,
                },
            }
            for i in range(n)
        ],
    }


def _mutate_facts(doc: dict, rng: random.Random) -> tuple[str, str]:
    """One mutation; returns (what, the file's text)."""
    kind = rng.choice(
        [
            "duplicate",
            "string-number",
            "nan",
            "null",
            "drop-key",
            "sandbox-type",
            "deep",
            "huge",
            "bool",
            "list-not-dict",
            "negative",
        ]
    )
    u = rng.choice(doc["units"])
    if kind == "duplicate":
        doc["units"].append(dict(u))
    elif kind == "string-number":
        k = rng.choice(["memory_kb", "uptime_s", "main_pid"])
        u[k] = str(u[k])
    elif kind == "nan":
        return kind, json.dumps(doc).replace(f'"uptime_s": {u["uptime_s"]}', '"uptime_s": NaN', 1)
    elif kind == "null":
        u[rng.choice(["memory_kb", "uptime_s", "unit", "sandbox"])] = None
    elif kind == "drop-key":
        target = rng.choice([doc, u])
        target.pop(rng.choice(sorted(target)))
    elif kind == "sandbox-type":
        u["sandbox"][rng.choice(sorted(u["sandbox"]))] = rng.choice([1, "yes", [], {}, None])
    elif kind == "deep":
        depth = rng.choice([50, 5_000, 100_000])
        return f"{kind} {depth}", json.dumps(doc)[:-1] + ', "x": ' + "[" * depth + "]" * depth + "}"
    elif kind == "huge":
        u[rng.choice(["memory_kb", "main_pid", "uptime_s"])] = rng.choice([10**400, 2**64, 1e308])
    elif kind == "bool":
        u[rng.choice(["memory_kb", "uptime_s"])] = True
    elif kind == "list-not-dict":
        doc["units"][doc["units"].index(u)] = [u]
    else:
        u[rng.choice(["memory_kb", "uptime_s", "main_pid"])] = -1
    return kind, json.dumps(doc)


def facts(args) -> dict:
    rng = random.Random(args.seed)
    work = workdir("facts")
    groups = work / "groups.toml"
    groups.write_text(
        'name = "r"\ncommand = ["/bin/true"]\n[[group]]\nname = "a"\nallocator = "glibc"\n'
        '[[group]]\nname = "b"\nallocator = "glibc"\nenv = { MALLOC_ARENA_MAX = "2" }\n'
    )
    results = []
    for i in range(args.count):
        what, text = _mutate_facts(_good_facts("h1", rng.randint(1, 6)), rng)
        f = work / f"facts-{i}.json"
        f.write_text(text)
        out = cli(
            ["fleet", "plan", "--facts", str(f), "--groups", str(groups), "-o", str(work / f"plan-{i}.json")],
            args.timeout,
        )
        problems = judge(out, allowed=(0, 2))
        if out["code"] == 0 and what == "duplicate":
            problems.append("duplicate unit planned")
        results.append(
            {
                "case": i,
                "mutation": what,
                "code": out["code"],
                "problems": problems,
                "line": (out["stderr"].strip().splitlines() or [""])[-1][:200],
            }
        )
    shutil.rmtree(work, ignore_errors=True)
    return summarize(results, {"internal_errors": sum(r["code"] == 70 for r in results)})


# ---- servers (issue 46) -----------------------------------------------------------------------------

HOSTS = [
    "evil.example",
    "evil.example:80",
    "localhost.evil.example",
    "127.0.0.1.nip.io",
    "[::ffff:7f00:1]",
    "",
    "10.0.0.1",
    "LOCALHOST",
    "localhost",
    "127.0.0.1",
]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ask(port: int, raw: bytes, timeout: float = 5.0) -> bytes:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(raw)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        got = b""
        try:
            while chunk := s.recv(65536):
                got += chunk
        except OSError:
            pass
        return got


def _server_threads(parent: int, module: str) -> int:
    """Threads of the companion `python -m MODULE` that `parent` started (0 if none found)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        if module.encode() in cmd and int(fields.get("PPid", "0")) == parent:
            return int(fields["Threads"])
    return 0


def servers(args) -> dict:
    import socket

    rng = random.Random(args.seed)
    work = workdir("servers")
    exp = work / "exp.toml"
    exp.write_text(
        'name = "srv"\ncommand = ["/bin/sleep", "600"]\nreplicas = 1\ninterval = "0.5s"\n'
        '[phases]\nload = "10m"\n[[group]]\nname = "a"\nallocator = "glibc"\n'
    )
    ports = {"metrics": _free_port(), "live": _free_port()}
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "alloclab",
            "run",
            str(exp),
            "-o",
            str(work / "run"),
            "--no-report",
            "--metrics",
            f"127.0.0.1:{ports['metrics']}",
            "--serve",
            f"127.0.0.1:{ports['live']}",
            "--max-duration",
            "10m",
        ],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    paths = {"metrics": "/metrics", "live": "/api/state"}
    results, leaked_answers, held, still_open, threads = [], 0, {}, {}, {}
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if all(
                    _ask(p, f"GET {paths[n]} HTTP/1.0\r\nHost: localhost\r\n\r\n".encode()).startswith(b"HTTP/1.0 200")
                    for n, p in ports.items()
                ):
                    break
            except OSError:
                pass
            time.sleep(0.5)
        for i in range(args.count):
            name = rng.choice(sorted(ports))
            kind = rng.choice(["host", "big", "garbage", "many-headers"])
            host = rng.choice(HOSTS)
            if kind == "host":
                raw = f"GET {paths[name]} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
            elif kind == "big":
                raw = f"GET {paths[name]}?{'a' * rng.choice([1000, 70_000, 2_000_000])} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()
            elif kind == "garbage":
                raw = rng.randbytes(rng.choice([10, 1000, 100_000]))
            else:
                raw = (
                    f"GET {paths[name]} HTTP/1.1\r\nHost: localhost\r\n"
                    + "X-A: b\r\n" * rng.choice([50, 500, 5000])
                    + "\r\n"
                ).encode()
            got = _ask(ports[name], raw)
            status = got[:12].decode("latin-1", "replace")
            problems = []
            loopback = host.lower().split(":")[0] in ("localhost", "127.0.0.1")
            if (
                kind == "host"
                and not loopback
                and got.startswith(b"HTTP/1.1 200")
                or got.startswith(b"HTTP/1.0 200")
                and kind == "host"
                and not loopback
            ):
                problems.append("answered a foreign Host")
                leaked_answers += 1
            results.append(
                {"case": i, "server": name, "kind": kind, "host": host, "code": status, "problems": problems}
            )
        for name, port in ports.items():  # 200 idle connections each: how many does the server hold?
            conns = []
            for _ in range(200):
                try:
                    conns.append(socket.create_connection(("127.0.0.1", port), timeout=5))
                except OSError:
                    break
            time.sleep(3.0)  # each accepted: answered 503 past the cap, or held
            refused = 0
            for c in conns:
                c.setblocking(False)
                try:
                    if c.recv(100).startswith(b"HTTP/1.0 503"):
                        refused += 1
                except BlockingIOError:
                    pass
                except OSError:
                    refused += 1
            held[name] = len(conns) - refused
            threads[name] = _server_threads(
                run.pid, {"metrics": "alloclab.serve.metrics", "live": "alloclab.serve.liveview"}[name]
            )
            time.sleep(12.0)  # past the idle timeout (10 s)
            open_after = 0
            for c in conns:
                try:
                    if c.recv(100) == b"":
                        continue
                    open_after += 1
                except BlockingIOError:
                    open_after += 1
                except OSError:
                    pass
                finally:
                    c.close()
            still_open[name] = open_after
    finally:
        os.killpg(run.pid, 15)
        try:
            run.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, 9)
            run.wait()
        log = (
            "".join(p.read_text(errors="replace") for p in (work / "run").glob("*.log"))
            if (work / "run").exists()
            else ""
        )
    shutil.rmtree(work, ignore_errors=True)
    return summarize(
        results,
        {
            "foreign_host_answered": leaked_answers,
            "idle_connections_held_of_200": held,
            "server_threads_with_200_idle": threads,
            "idle_connections_open_after_15s": still_open,  # 3 s + 12 s
            "server_tracebacks": log.count("Traceback"),
        },
    )


# ---- starve (issue 46) ------------------------------------------------------------------------------


def starve(args) -> dict:
    work = workdir("starve")
    exp = work / "exp.toml"
    exp.write_text(
        f'name = "starve"\ncommand = ["/bin/sh", "-c", "while :; do :; done"]\nreplicas = {args.count}\n'
        'interval = "0.5s"\ngrace = "1s"\n[phases]\nload = "6s"\n[[group]]\nname = "a"\nallocator = "glibc"\n'
    )
    started = time.monotonic()
    p = subprocess.run(
        [
            "taskset",
            "-c",
            "0",
            sys.executable,
            "-m",
            "alloclab",
            "run",
            str(exp),
            "-o",
            str(work / "run"),
            "--no-report",
        ],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=args.timeout,
    )
    wall = time.monotonic() - started
    conn = sqlite3.connect(work / "run" / "run.db")
    best, first = conn.execute(
        "SELECT MAX(n), MIN(t0) FROM (SELECT COUNT(*) AS n, MIN(t) AS t0 FROM samples GROUP BY replica_id)"
    ).fetchone()
    t_start = float(conn.execute("SELECT value FROM meta WHERE key = 'started_at'").fetchone()[0])
    skipped = conn.execute("SELECT value FROM meta WHERE key = 'ticks_skipped'").fetchone()
    conn.close()
    shutil.rmtree(work, ignore_errors=True)
    result = {"case": 0, "code": p.returncode, "problems": [] if p.returncode == 0 else [f"exit {p.returncode}"]}
    return summarize(
        [result],
        {
            "replicas": args.count,
            "wall_s": round(wall, 1),
            "ticks_recorded": best,
            "ticks_planned": 13,
            "first_sample_after_s": round(first - t_start, 2) if first else None,
            "ticks_skipped": int(skipped[0]) if skipped else 0,
        },
    )


def summarize(results: list[dict], extra: dict) -> dict:
    bad = [r for r in results if r["problems"]]
    summary = {
        "cases": len(results),
        "exit_codes": dict(Counter(str(r["code"]) for r in results)),
        "tracebacks": sum("traceback" in r["problems"] for r in results),
        "hangs": sum("hang" in r["problems"] for r in results),
        "problem_cases": len(bad),
        **extra,
    }
    for r in bad[:30]:
        print("PROBLEM", json.dumps(r)[:600], file=sys.stderr)
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("campaign", choices=["stores", "roots", "loader", "links", "facts", "servers", "starve"])
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds before a command counts as a hang")
    args = ap.parse_args()
    started = time.monotonic()
    summary = {"campaign": args.campaign, "seed": args.seed, **globals()[args.campaign](args)}
    summary["wall_seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(summary, indent=1))
    return 1 if summary["problem_cases"] else 0


if __name__ == "__main__":
    sys.exit(main())
