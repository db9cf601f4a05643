"""Fuzz campaigns over the surfaces of issue 30, through the real CLI in child processes:

    PYTHONPATH=src .venv/bin/python benchmarks/fuzz_hostile.py stores  [--count 200] [--seed 1]
    PYTHONPATH=src .venv/bin/python benchmarks/fuzz_hostile.py roots   [--count 100] [--seed 1]
    PYTHONPATH=src .venv/bin/python benchmarks/fuzz_hostile.py loader  [--count 300] [--seed 1]

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
    p = subprocess.Popen([sys.executable, "-m", "alloclab", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, errors="replace", env=ENV, cwd=cwd, start_new_session=True)
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            err = p.stderr.read()
            return {"code": os.waitstatus_to_exitcode(status), "stderr": err, "rss_mb": usage.ru_maxrss / 1024,
                    "seconds": time.monotonic() - started}
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


def stores(args) -> dict:
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix=f"alloclab-fuzz-stores-{os.getpid()}-"))
    intact = work / "intact"
    r = cli(["import", "torutils", str(DATA), "-o", str(intact)], 120)
    assert r["code"] == 0, r["stderr"]
    results, worst = [], 0.0
    for i in range(args.count):
        run = work / f"case-{i}"
        shutil.copytree(intact, run, ignore=shutil.ignore_patterns("report*", "summary*", "charts", "*.csv"))
        what = damage_store(run / "run.db", rng)
        before = hashlib.sha256((run / "run.db").read_bytes()).hexdigest()
        cmd = rng.choice(["report", "compare", "export", "bundle"])
        argv = {"report": ["report", str(run)], "compare": ["compare", str(intact), str(run)],
                "export": ["export", str(run), "--csv", str(work / f"csv-{i}")],
                "bundle": ["bundle", str(run), "-o", str(work / f"b-{i}.tar.gz")]}[cmd]
        out = cli(argv, args.timeout)
        problems = judge(out)
        if cmd != "report" and hashlib.sha256((run / "run.db").read_bytes()).hexdigest() != before:
            problems.append("store changed")
        worst = max(worst, out["rss_mb"])
        results.append({"case": i, "damage": what, "cmd": cmd, "code": out["code"], "problems": problems,
                        "rss_mb": round(out["rss_mb"]), "line": out["stderr"].strip().splitlines()[-1][:200] if out["stderr"].strip() else ""})
        shutil.rmtree(run, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    return summarize(results, {"peak_rss_mb": round(worst)})


# ---- roots ----------------------------------------------------------------------------------------

LINK_PLACES = ["etc/systemd/system/svc.service.d", "etc/systemd/system/svc.service.d/50-alloclab.conf",
               "etc/systemd/system/svc.service.d/50-alloclab.tmp", "etc/systemd/system/svc.service.d/50-alloclab.conf.tmp",
               "var", "var/lib", "var/lib/alloclab", "var/lib/alloclab/fleet", "var/lib/alloclab/fleet/applied",
               "run/alloclab-units", "run/alloclab-units/svc.service.pid"]


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
        r = cli(["fleet", "plan", "--units", "svc", "--groups", str(groups), "-o", str(plan), "--root", str(root),
                 "--systemctl", "local"], args.timeout)
        planted = rng.sample(LINK_PLACES, rng.randint(1, 3))
        for place in sorted(planted, key=len):
            link = root / place
            if link.exists() or link.is_symlink():
                continue
            link.parent.mkdir(parents=True, exist_ok=True) if not any(p.is_symlink() for p in [link.parent, *link.parent.parents]) else None
            try:
                link.symlink_to(rng.choice([outside / "victim", outside / "dir", outside / "new"]))
            except OSError:
                pass
        before = digest(outside)
        outs = [r]
        for step in (["fleet", "apply", str(plan), "--root", str(root), "--systemctl", "local", "--batch", "1"],
                     ["fleet", "rollback", "--root", str(root), "--systemctl", "local"]):
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
        results.append({"case": i, "planted": planted, "codes": [o["code"] for o in outs], "problems": problems,
                        "code": outs[1]["code"], "line": (outs[1]["stderr"].strip().splitlines() or [""])[-1][:200]})
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
    from alloclab.allocators import loaderenv           # the variable names; the checks run in the CLI under test
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix=f"alloclab-fuzz-loader-{os.getpid()}-"))
    os.chmod(work, 0o755)
    dirs = {}
    for name, mode, owner in [("ok", 0o755, None), ("ww", 0o777, None), ("gw", 0o775, None), ("sticky", 0o1777, None),
                              ("nobody", 0o755, 65534), ("okchild", 0o755, None)]:
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
    entries = [str(work / n) for n in ("ok", "ww", "gw", "sticky", "nobody", "sticky/inner", "ww/inner", "link-ok", "link-ww")] + \
              ["/usr/lib", "/lib", "/nonexistent-alloclab", "relative/lib", "$ORIGIN/lib", "", "/tmp", str(work / "ok" / "lib.so")]
    files = [str(work / n / "lib.so") for n in ("ok", "ww", "nobody", "sticky", "link-ok")] + ["/lib/x86_64-linux-gnu/libc.so.6"]
    names = list(loaderenv.LOADED_FROM) + sorted(loaderenv.REFUSED) + sorted(loaderenv.HARMLESS_LD)[:3] + ["LD_FANCY", "MALLOC_ARENA_MAX"]
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
        exp.write_text(f'name = "l"\ncommand = ["/bin/true"]\n[[group]]\nname = "a"\nallocator = "glibc"\nenv = {{ {table} }}\n')
        out = cli(["check", str(exp)], args.timeout)
        problems = judge(out, (0, 2))
        if out["code"] == 0:             # accepted: the oracle must agree for every loader variable
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
        results.append({"case": i, "env": env, "code": out["code"], "problems": problems,
                        "line": (out["stderr"].strip().splitlines() or [""])[-1][:200]})
    shutil.rmtree(work, ignore_errors=True)
    return summarize(results, {})


def summarize(results: list[dict], extra: dict) -> dict:
    bad = [r for r in results if r["problems"]]
    summary = {"cases": len(results), "exit_codes": dict(Counter(str(r["code"]) for r in results)),
               "tracebacks": sum("traceback" in r["problems"] for r in results),
               "hangs": sum("hang" in r["problems"] for r in results),
               "problem_cases": len(bad), **extra}
    for r in bad[:30]:
        print("PROBLEM", json.dumps(r)[:600], file=sys.stderr)
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("campaign", choices=["stores", "roots", "loader"])
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
