"""The tor-network scenario: a private Tor test network on loopback whose relays are the replicas.

`[scenario] name = "tor-network"` in an experiment file. The runner asks this module for
- the relays' command (`relay_command`: tor -f {workdir}/torrc) and their directory load
  (`load_command`: alloclab/tor/dirload.py against the relay's DirPort), started like any
  replica's and load client's, under the group's LD_PRELOAD, sampled and verified;
- the supporting processes (`TorNetwork`): directory authorities, whose keys and torrcs it
  generates, started by the runner (run token in their environment, parent-death signal,
  registered with the watchdog), so they end with the run however it ends.

Everything lives in a network namespace holding only loopback (alloclab enters it before the
network starts; refused when the kernel does not allow it). Ports: a relay's DirPort is its
replica {port}, its ORPort {port} + OR_PORT_OFFSET; authorities sit just below port_base.
The network directory (keys, torrcs, logs) is kept in RUN/tor-network, each relay's in its
replica's work directory.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..common.errors import UserError
from ..common.outputs import TOR_NETWORK_DIR
from ..experiment_file import Experiment, Group

CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
OR_PORT_OFFSET = 2048  # port_base <= 60000, + 1,024 replicas + this < 65,536
LOAD_OUT = "dirload.json"  # in each replica's log directory
ROUTERS_OUT = "routers.json"  # the descriptor-only routers' status, in the network directory
ROUTERS_LISTED = 0.9  # the relays start once the consensus lists this share of the routers
DIRECTORY_HELD = 0.95  # a relay holds the directory once it has descriptors for this share of its consensus
DIRECTORY_CHECK_SHARE = 0.05  # reading the relays' caches may take this share of the time while the directory comes in
TRAFFIC_DIR = "traffic"  # in the network directory: each group's tor client, the sink, their counts
RELAY_MEASURED_KB = (
    10_000  # the relays' bandwidth in the authorities' bandwidth file (traffic): above the Fast threshold
)
TRAFFIC_PORTS_BELOW = 64  # the sink and the clients' SOCKS ports sit below the authorities' 64 ports
_libc = ctypes.CDLL(None, use_errno=True)


# ---- what the runner asks for ----------------------------------------------------------------------


def tor_program(exp: Experiment, g: Group | None = None) -> str:
    return g.command[0] if g is not None and g.command else exp.scenario.tor


def relay_command(exp: Experiment, g: Group) -> tuple[str, ...]:
    """A relay: the group's tor (its command, else the scenario's) on the torrc written for it."""
    base = g.command or (exp.scenario.tor,)
    return (*base, "-f", "{workdir}/torrc", "--defaults-torrc", "/dev/null")


def load_command(exp: Experiment) -> tuple[str, ...]:
    """The directory load of one relay (a stdlib-only script, so it needs no import path)."""
    sc = exp.scenario
    duration = (exp.phases.load or 3600.0) + 60
    return (
        sys.executable,
        str(Path(__file__).with_name("dirload.py")),
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
        "--out",
        "{workdir}/../" + LOAD_OUT,
        "--rate",
        f"{sc.load_rate:g}",
        "--requests",
        str(sc.load_requests),
        "--duration",
        f"{duration:g}",
        "--seed",
        "{seed}",
    )


def serves_directory(torrc: tuple[str, ...]) -> bool:
    """Whether relays with these options are directory caches (the last DirCache line wins, as in
    tor): a DirCache 0 relay gets no DirPort (tor refuses one without the cache) and no directory load."""
    last = [line.split()[1:2] for line in torrc if line.split()[0].lower() == "dircache"]
    return not last or last[-1] != ["0"]


def tor_gencert(tor: str) -> str:
    """tor-gencert: beside the tor binary, else on PATH."""
    beside = Path(tor).with_name("tor-gencert")
    found = str(beside) if beside.is_file() else shutil.which("tor-gencert")
    if not found:
        raise UserError(
            f"tor-gencert not found (beside {tor} or on PATH)",
            "install Debian's tor package (apt-get install tor), which ships it",
        )
    return found


def namespace_refusal() -> str | None:
    """Why a loopback-only network namespace cannot be made here (None: it can). Probed in a child,
    so nothing of alloclab's own changes."""
    probe = (
        "import ctypes,sys;l=ctypes.CDLL(None,use_errno=True);"
        f"sys.exit(0 if l.unshare({CLONE_NEWNET})==0 else ctypes.get_errno())"
    )
    rc = subprocess.run([sys.executable, "-c", probe], stdin=subprocess.DEVNULL, capture_output=True).returncode
    return None if rc == 0 else os.strerror(rc)


def check(exp: Experiment, resolve: Callable[[str], str]) -> None:
    """preflight: the tor binaries run, tor-gencert exists, a network namespace can be made, and
    every group's torrc options are accepted by its tor (`tor --verify-config`)."""
    why = namespace_refusal()
    if why:
        raise UserError(
            f"the tor-network scenario needs a network namespace holding only loopback, and this kernel "
            f"refused one ({why})",
            "run alloclab as root (or with CAP_SYS_ADMIN); it never runs tor on the host's network",
        )
    tor_gencert(resolve(exp.scenario.tor))
    checked: set[tuple[str, tuple[str, ...]]] = set()
    for g in exp.groups:
        tor = resolve(tor_program(exp, g))
        lines = exp.scenario.torrc + g.torrc
        if (tor, lines) in checked:
            continue
        checked.add((tor, lines))
        with _TempDir() as tmp:
            torrc = Path(tmp) / "torrc"
            torrc.write_text(
                "".join(
                    line + "\n"
                    for line in (
                        "TestingTorNetwork 1",
                        f"DataDirectory {tmp}/data",
                        "SocksPort 0",
                        "ORPort 127.0.0.1:5000",
                        "ContactInfo alloclab@test.invalid",
                        "ExitRelay 0",
                        "DirCache 1",
                        *(["DirPort 127.0.0.1:5003"] if serves_directory(lines) else []),
                        f"DirAuthority check orport=5001 no-v2 v3ident={'A' * 40} 127.0.0.1:5002 {'B' * 40}",
                        *lines,
                    )
                )
            )
            try:
                out = subprocess.run(
                    [tor, "--verify-config", "-f", str(torrc), "--defaults-torrc", "/dev/null"],
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise UserError(f"cannot run {tor}: {exc}", "name a working tor binary") from None
        if out.returncode != 0:
            warns = [ln.split("]", 1)[-1].strip() for ln in out.stdout.splitlines() if "[warn]" in ln]
            msg = next(
                (w for w in warns if "Failed to parse" in w or "Unknown option" in w),
                warns[-1] if warns else "it exited with an error",
            )
            raise UserError(
                f"group {g.name!r}: {tor} refuses its torrc options: {msg}",
                "fix the torrc lines of the group or [scenario]",
            )


class _TempDir:
    def __enter__(self) -> str:
        import tempfile

        self.path = tempfile.mkdtemp(prefix="alloclab-torrc-")
        return self.path

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


# ---- the namespace ---------------------------------------------------------------------------------


class LoopbackNamespace:
    """alloclab's main thread enters a fresh network namespace (everything it starts after that
    inherits it) with only `lo`, brought up; `leave` returns to the original one."""

    def __init__(self) -> None:
        self.original: int | None = None

    def enter(self) -> None:
        self.original = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        if _libc.unshare(CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            os.close(self.original)
            self.original = None
            raise UserError(
                f"cannot create a network namespace for the tor network ({os.strerror(err)})",
                "run alloclab as root (or with CAP_SYS_ADMIN)",
            )
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            ifr = fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sH14x", b"lo", 0))
            flags = struct.unpack("16sH14x", ifr)[1]
            fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))
        if interfaces() != ["lo"]:  # a fresh namespace has only lo; anything else is not ours to use
            self.leave()
            raise UserError(
                f"the new network namespace holds {', '.join(interfaces())}, not only loopback",
                "report this: alloclab runs the tor network on loopback only",
            )

    def leave(self) -> None:
        if self.original is not None:
            _libc.setns(self.original, CLONE_NEWNET)
            os.close(self.original)
            self.original = None


def interfaces() -> list[str]:
    return sorted(name for _, name in socket.if_nameindex())


# ---- keys and torrcs -------------------------------------------------------------------------------


@dataclass
class Authority:
    nick: str
    datadir: Path
    dir_port: int
    or_port: int
    v3ident: str = ""
    fingerprint: str = ""

    @property
    def line(self) -> str:
        return (
            f"DirAuthority {self.nick} orport={self.or_port} no-v2 v3ident={self.v3ident} "
            f"127.0.0.1:{self.dir_port} {self.fingerprint}"
        )


def _run(argv: list[str], stdin: str = "") -> str:
    out = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise UserError(
            f"{' '.join(argv[:2])} failed: {(out.stderr or out.stdout).strip().splitlines()[-1:]}",
            "check the tor installation (tor --version)",
        )
    return out.stdout


def nickname(text: str) -> str:
    """A tor nickname: 1-19 letters and digits."""
    return (re.sub(r"[^A-Za-z0-9]", "", text) or "relay")[:19]


class TorNetwork:
    """The test network of one run: authorities (supporting processes) and the relays' torrcs."""

    def __init__(self, exp: Experiment, run_dir: Path, tor: str):
        self.exp, self.sc = exp, exp.scenario
        self.dir = run_dir / TOR_NETWORK_DIR  # the network: keys, torrcs, logs
        self.tor = tor
        self.authorities: list[Authority] = []
        self.relays: list = []  # runner replicas
        self.namespace = LoopbackNamespace()
        self.consensus_at: float | None = None
        self.relays_ready_at: float | None = None
        self.directory_at: float | None = None  # every relay held the directory (the end of the warm-up)
        self.holding: dict[str, dict] = {}  # relay -> its directory_held figures, once it held it
        self._next_check = 0.0
        self.fingerprints: dict[str, str] = {}  # relay -> identity fingerprint (made at build with `traffic`)

    # authorities' ports sit just below port_base (relays use [port_base, port_base + 1024) and the same + 2048)
    def build(self, replicas: list) -> None:
        """Keys, fingerprints and torrcs for the authorities and every relay (replica)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        gencert = tor_gencert(self.tor)
        base = self.exp.port_base
        for i in range(self.sc.authorities):
            a = Authority(f"auth{i}", self.dir / f"auth{i}", base - 1 - i, base - 33 - i)
            keys = a.datadir / "keys"
            keys.mkdir(parents=True, exist_ok=True)
            _run(
                [
                    gencert,
                    "--create-identity-key",
                    "-m",
                    "12",
                    "-a",
                    f"127.0.0.1:{a.dir_port}",
                    "-i",
                    str(keys / "authority_identity_key"),
                    "-s",
                    str(keys / "authority_signing_key"),
                    "-c",
                    str(keys / "authority_certificate"),
                    "--passphrase-fd",
                    "0",
                ],
                stdin="\n",
            )
            cert = (keys / "authority_certificate").read_text()
            a.v3ident = re.search(r"^fingerprint ([0-9A-F]{40})$", cert, re.M).group(1)
            a.fingerprint = self._fingerprint(a.datadir, a.nick)
            self.authorities.append(a)
        self.relays = list(replicas)
        if self.sc.traffic:  # the relays' identity keys made now: the authorities vote them by fingerprint
            self.fingerprints = {r.name: self._fingerprint(r.workdir / "data", nickname(r.name)) for r in replicas}
        for a in self.authorities:
            (a.datadir / "torrc").write_text(self._torrc(a.nick, a.datadir, a.or_port, a.dir_port, authority=True))
        for r in replicas:
            extra = self.sc.torrc + r.group.torrc
            (r.workdir / "torrc").write_text(
                self._torrc(
                    nickname(r.name),
                    r.workdir / "data",
                    r.port + OR_PORT_OFFSET,
                    r.port if serves_directory(extra) else None,
                    extra=extra,
                )
            )
        if self.sc.traffic:
            self._build_traffic()
        (self.dir / "network.json").write_text(
            json.dumps(
                {
                    "tor": self.tor,
                    "voting_interval_s": self.sc.voting_interval,
                    "authorities": [
                        {
                            "nick": a.nick,
                            "dir_port": a.dir_port,
                            "or_port": a.or_port,
                            "v3ident": a.v3ident,
                            "fingerprint": a.fingerprint,
                        }
                        for a in self.authorities
                    ],
                    "relays": [
                        {
                            "replica": r.name,
                            "nick": nickname(r.name),
                            "dir_port": r.port if serves_directory(self.sc.torrc + r.group.torrc) else None,
                            "or_port": r.port + OR_PORT_OFFSET,
                            "torrc": str(r.workdir / "torrc"),
                        }
                        for r in replicas
                    ],
                },
                indent=1,
            )
        )

    def _fingerprint(self, datadir: Path, nick: str) -> str:
        out = _run(
            [
                self.tor,
                "--quiet",
                "--ignore-missing-torrc",
                "--defaults-torrc",
                "/dev/null",
                "--list-fingerprint",
                "--DataDirectory",
                str(datadir),
                "--ORPort",
                "1",
                "--Nickname",
                nick,
            ]
        )
        words = out.split()
        return "".join(words[1:]) if words and words[0] == nick else "".join(words[-10:])

    def _torrc(
        self,
        nick: str,
        datadir: Path,
        or_port: int,
        dir_port: int | None,
        authority: bool = False,
        extra: tuple[str, ...] = (),
    ) -> str:
        v = int(self.sc.voting_interval)
        delay = max(2, v // 5)
        lines = [
            "# written by alloclab (tor-network scenario)",
            "TestingTorNetwork 1",
            f"Nickname {nick}",
            f"DataDirectory {datadir}",
            f"PidFile {datadir}/pid",
            f"Log notice file {datadir}/notice.log",
            "RunAsDaemon 0",
            "SafeLogging 0",
            "ShutdownWaitLength 0",
            "Address 127.0.0.1",
            "SocksPort 0",
            f"ORPort 127.0.0.1:{or_port}",
            *([f"DirPort 127.0.0.1:{dir_port}", "DirCache 1"] if dir_port is not None else []),
            *self._exit_lines(),
            "AssumeReachable 1",
            "ContactInfo alloclab@test.invalid",
            "PublishServerDescriptor 1",
            "DownloadExtraInfo 1",
            "FetchUselessDescriptors 1",
            "V3AuthNIntervalsValid 3",
            *[a.line for a in self.authorities],
        ]
        if authority:
            lines += [
                "AuthoritativeDirectory 1",
                "V3AuthoritativeDirectory 1",
                f"TestingV3AuthInitialVotingInterval {v}",
                f"TestingV3AuthInitialVoteDelay {delay}",
                f"TestingV3AuthInitialDistDelay {delay}",
                f"V3AuthVotingInterval {v}",
                f"V3AuthVoteDelay {delay}",
                f"V3AuthDistDelay {delay}",
                "TestingV3AuthVotingStartOffset 0",
            ]
            if self.sc.routers:  # the descriptor-only routers have no ORPort to test: vote them Running
                lines += ["AuthDirTestReachability 0"]
            if self.sc.traffic:  # the relays under test (not the authorities) are guards and exits (to the sink
                under_test = ",".join(
                    f"${fp}" for fp in self.fingerprints.values()
                )  # only), measured fast enough for Fast
                lines += [
                    f"TestingDirAuthVoteGuard {under_test}",
                    "TestingDirAuthVoteGuardIsStrict 1",
                    f"TestingDirAuthVoteExit {under_test}",
                    "TestingDirAuthVoteExitIsStrict 1",
                    f"V3BandwidthsFile {self.dir / TRAFFIC_DIR / 'bandwidths'}",
                ]
            elif (
                self.sc.variant == "co-guard"
            ):  # the relays under test (all on 127.0.0.1; routers are 127.100+) are guards
                lines += ["TestingDirAuthVoteGuard 127.0.0.1", "TestingDirAuthVoteGuardIsStrict 1"]
        lines += ["# the experiment's own options (scenario, then group): later lines win", *extra]
        return "".join(line + "\n" for line in lines)

    # ---- relay traffic (`traffic`): per group a tor client whose circuits use only that group's relays ----
    @property
    def sink_port(self) -> int:
        return self.exp.port_base - TRAFFIC_PORTS_BELOW - 1

    def socks_port(self, group_index: int) -> int:
        return self.sink_port - 1 - group_index

    def _exit_lines(self) -> list[str]:
        """Relays are not exits, except with `traffic`: then exits to the sink's port only (the
        namespace holds nothing but loopback; `accept *:PORT`, as a port-only policy is what a
        microdescriptor carries and clients choose exits by)."""
        if not self.sc.traffic:
            return ["ExitRelay 0", "ExitPolicy reject *:*"]
        return [
            "ExitRelay 1",
            f"ExitPolicy accept *:{self.sink_port}",
            "ExitPolicy reject *:*",
            "ExitPolicyRejectPrivate 0",
            "ExitPolicyRejectLocalInterfaces 0",
            "ServerDNSDetectHijacking 0",
        ]

    def _build_traffic(self) -> None:
        """The relays' identity keys made now (their fingerprints name each group's relays in its
        client's EntryNodes, MiddleNodes and ExitNodes), and one tor client's torrc per group."""
        fps = self.fingerprints
        (self.dir / TRAFFIC_DIR).mkdir(parents=True, exist_ok=True)
        # a circuit's every hop must be Fast (a guard Stable and Fast too): the relays' observed bandwidth
        # is 0 until they carry traffic, so the authorities read them as measured (a bandwidth file, as
        # from the public network's bandwidth scanners) at RELAY_MEASURED_KB
        (self.dir / TRAFFIC_DIR / "bandwidths").write_text(
            f"{int(time.time())}\n" + "".join(f"node_id=${fp} bw={RELAY_MEASURED_KB}\n" for fp in fps.values())
        )
        for i, g in enumerate(self.exp.groups):
            cdir = self.dir / TRAFFIC_DIR / f"client{i}"
            cdir.mkdir(parents=True, exist_ok=True)
            nodes = ",".join(f"${fps[r.name]}" for r in self.relays if r.group.name == g.name)
            others = ",".join(f"${fps[r.name]}" for r in self.relays if r.group.name != g.name)
            lines = [
                "# written by alloclab (tor-network scenario, traffic): a client using only this group's relays",
                "TestingTorNetwork 1",
                f"DataDirectory {cdir / 'data'}",
                f"Log notice file {cdir / 'notice.log'}",
                "RunAsDaemon 0",
                "SafeLogging 0",
                "ShutdownWaitLength 0",
                f"SocksPort 127.0.0.1:{self.socks_port(i)}",
                "ClientUseIPv6 0",
                "ClientRejectInternalAddresses 0",
                "DownloadExtraInfo 0",
                # every hop a relay of this group: first hops are the Guards (only the relays under test
                # are voted Guard) but those of other groups; no guard state (UseEntryGuards 0: each
                # circuit picks its first hop anew, and a guard would need the Stable flag, days of uptime)
                "UseEntryGuards 0",
                f"MiddleNodes {nodes}",
                f"ExitNodes {nodes}",
                *([f"ExcludeNodes {others}"] if others else []),
                "StrictNodes 0",
                "LearnCircuitBuildTimeout 0",
                "CircuitBuildTimeout 30",
                # conflux legs need distinct guards and middles: three relays cannot give two legs
                "ConfluxEnabled 0",
                *[a.line for a in self.authorities],
            ]
            (cdir / "torrc").write_text("".join(line + "\n" for line in lines))

    def traffic_support(self) -> list[tuple[str, list[str], Path]]:
        """The sink and each group's tor client, started with the relays (the clients bootstrap
        during the warm-up)."""
        if not self.sc.traffic:
            return []
        tdir = self.dir / TRAFFIC_DIR
        out = [
            (
                "sink",
                [
                    sys.executable,
                    str(Path(__file__).with_name("traffic.py")),
                    "sink",
                    "--port",
                    str(self.sink_port),
                    "--out",
                    str(tdir / "sink.json"),
                ],
                tdir,
            )
        ]
        for i in range(len(self.exp.groups)):
            cdir = tdir / f"client{i}"
            out.append((f"client{i}", [self.tor, "-f", str(cdir / "torrc"), "--defaults-torrc", "/dev/null"], cdir))
        return out

    def traffic_commands(self) -> list[tuple[str, list[str], Path]]:
        """Each group's streams through its client, for the load phase (+ 60 s, as the directory load)."""
        duration = (self.exp.phases.load or 3600.0) + 60
        tdir = self.dir / TRAFFIC_DIR
        return [
            (
                g.name,
                [
                    sys.executable,
                    str(Path(__file__).with_name("traffic.py")),
                    "client",
                    "--socks",
                    str(self.socks_port(i)),
                    "--target",
                    str(self.sink_port),
                    "--rate",
                    f"{self.sc.traffic * 1000:g}",
                    "--out",
                    str(tdir / f"client{i}.json"),
                    "--duration",
                    f"{duration:g}",
                    "--seed",
                    str(self.exp.seed * 100 + i),
                ],
                tdir,
            )
            for i, g in enumerate(self.exp.groups)
        ]

    def traffic_counts(self) -> dict[str, dict]:
        out = {}
        for i, g in enumerate(self.exp.groups):
            try:
                out[g.name] = json.loads((self.dir / TRAFFIC_DIR / f"client{i}.json").read_text())
            except (OSError, ValueError):
                out[g.name] = {}
        return out

    def router_command(self) -> tuple[list[str], Path] | None:
        """The descriptor-only routers (alloclab/tor/routers.py) that fill the directory to
        `routers`, uploading to every authority and churning once per voting interval; None without."""
        if not self.sc.routers:
            return None
        argv = [
            sys.executable,
            str(Path(__file__).with_name("routers.py")),
            "--routers",
            str(self.sc.routers),
            "--interval",
            f"{self.sc.voting_interval:g}",
            "--churn",
            f"{self.sc.router_churn:g}",
            "--out",
            str(self.dir / ROUTERS_OUT),
            "--seed",
            str(self.exp.seed),
        ]
        for a in self.authorities:
            argv += ["--authority", f"127.0.0.1:{a.dir_port}"]
        return argv, self.dir

    def routers_status(self) -> dict:
        try:
            return json.loads((self.dir / ROUTERS_OUT).read_text())
        except (OSError, ValueError):
            return {}

    def consensus_bytes(self) -> int:
        """Size of the (full-flavour) consensus the first authority holds: the directory's size."""
        try:
            return (self.authorities[0].datadir / "cached-consensus").stat().st_size
        except (OSError, IndexError):
            return 0

    def directory_ready(self) -> tuple[str, int] | None:
        """The authorities' consensus once it lists the directory the relays are to cache: any
        consensus without descriptor-only routers, else one listing ROUTERS_LISTED of them."""
        got = self.authority_consensus(count=bool(self.sc.routers))
        if got is None or got[1] - len(self.authorities) < ROUTERS_LISTED * self.sc.routers:
            return None
        return got

    def has_load(self, replica) -> bool:
        return serves_directory(self.sc.torrc + replica.group.torrc)

    def authority_commands(self) -> list[tuple[str, list[str], Path]]:
        return [
            (a.nick, [self.tor, "-f", str(a.datadir / "torrc"), "--defaults-torrc", "/dev/null"], a.datadir)
            for a in self.authorities
        ]

    # ---- progress ----
    @staticmethod
    def _consensus(datadir: Path, count: bool = True) -> tuple[str, int] | None:
        """(valid-after, relays listed) of the consensus a tor holds, or None (count=False: 0 listed,
        only the head is read)."""
        for name in ("cached-consensus", "cached-microdesc-consensus"):
            try:
                with open(datadir / name, "rb") as f:
                    head = f.read() if count else f.read(4096)
            except OSError:
                continue
            m = re.search(rb"^valid-after (.+)$", head, re.M)
            if m:
                return m.group(1).decode(), len(re.findall(rb"^r ", head, re.M))
        return None

    def authority_consensus(self, count: bool = True) -> tuple[str, int] | None:
        got = [c for a in self.authorities if (c := self._consensus(a.datadir, count))]
        return max(got) if len(got) == len(self.authorities) else None

    def relays_with_consensus(self) -> int:
        return sum(self._consensus(r.workdir / "data", count=False) is not None for r in self.relays)

    def relays_holding_directory(self) -> dict[str, dict]:
        """The relays that hold the whole directory (`directory_held`), with their figures; a relay
        once counted is not read again, and the reads take at most DIRECTORY_CHECK_SHARE of the time
        (a relay's caches are tens of MB at 7,000 routers: a check every few ticks; a small directory:
        every tick)."""
        started = time.monotonic()
        if started < self._next_check:
            return self.holding
        for r in self.relays:
            if r.name not in self.holding:
                got = directory_held(r.workdir / "data", cache=self.has_load(r))
                if got["held"]:
                    self.holding[r.name] = got
        self._next_check = time.monotonic() + (time.monotonic() - started) / DIRECTORY_CHECK_SHARE
        return self.holding

    def relays_listed(self) -> int:
        c = self.authority_consensus()
        return 0 if c is None else max(0, c[1] - len(self.authorities))

    def load_counts(self) -> dict[str, dict]:
        out = {}
        for r in self.relays:
            try:
                out[r.name] = json.loads((r.log_dir / LOAD_OUT).read_text())
            except (OSError, ValueError):
                out[r.name] = {}
        return out

    def authority_log_tail(self, lines: int = 3) -> str:
        tails = []
        for a in self.authorities:
            try:
                text = (a.datadir / "notice.log").read_text(errors="replace").strip().splitlines()
            except OSError:
                continue
            tails += [f"{a.nick}: {ln}" for ln in text[-lines:]]
        return "\n".join(tails)


def _read_all(*paths: Path) -> bytes:
    out = b""
    for p in paths:
        try:
            out += p.read_bytes()
        except OSError:
            pass
    return out


def directory_held(datadir: Path, cache: bool = True) -> dict:
    """What of the directory one relay's data directory holds: the routers its consensus lists, the
    distinct routers it holds a server descriptor for (`fingerprint` lines of cached-descriptors and
    its journal) and the microdescriptors for distinct routers (`id ed25519` lines), against the
    microdesc consensus's entries. `held`: a consensus and descriptors for DIRECTORY_HELD of its
    routers — both kinds for a directory cache (it fetches and serves both), either for a relay
    without the cache (it fetches only what it uses). Identities, not digests: a router publishing
    anew (churn) is held until the next fetch replaces its descriptor, as on a public relay."""
    ns = _read_all(datadir / "cached-consensus")
    md_ns = _read_all(datadir / "cached-microdesc-consensus")
    listed, md_listed = ns.count(b"\nr "), md_ns.count(b"\nm ")
    descs = len(
        set(
            re.findall(
                rb"\nfingerprint ([^\n]*)",
                b"\n" + _read_all(datadir / "cached-descriptors", datadir / "cached-descriptors.new"),
            )
        )
    )
    mds = len(
        set(
            re.findall(
                rb"\nid ed25519 ([^\n]*)",
                b"\n" + _read_all(datadir / "cached-microdescs", datadir / "cached-microdescs.new"),
            )
        )
    )
    full = [listed > 0 and descs >= DIRECTORY_HELD * listed, md_listed > 0 and mds >= DIRECTORY_HELD * md_listed]
    return {
        "listed": listed,
        "descriptors": descs,
        "md_listed": md_listed,
        "microdescs": mds,
        "held": all(full) if cache else any(full),
    }


# ---- the scenario the runner runs (scenarios.Scenario) ---------------------------------------------


class TorScenario:
    """The tor-network scenario behind scenarios.Scenario: the replicas are relays, the directory
    authorities (and descriptor-only routers) supporting processes, all in a loopback-only namespace."""

    def __init__(self, exp: Experiment):
        self.exp = exp
        self.network: TorNetwork | None = None  # made by setup, in the run directory
        self.failed: str | None = None  # why the network did not form
        self.hold_over = False  # the warm-up's hold ended without the directory
        self.traffic_started = False

    def prepare(self, resolve: Callable[[str], str]) -> None:
        check(self.exp, resolve)
        self.tor = resolve(self.exp.scenario.tor)

    def command(self, group: Group) -> tuple[str, ...]:
        return relay_command(self.exp, group)

    def load_command(self) -> tuple[str, ...]:
        return load_command(self.exp)

    def has_load(self, replica) -> bool:
        return self.network.has_load(replica)

    def setup(self, run) -> str | None:
        """Enter the loopback-only namespace, build the test network, start its authorities (owned
        like replicas: run token, parent-death signal, registered with the watchdog) and wait for
        their first consensus. A reason to stop, or None once the consensus is there."""
        net = self.network = TorNetwork(self.exp, run.run_dir, self.tor)
        net.namespace.enter()
        with run.store.transaction():
            run.store.set_meta(network_namespace="interfaces: " + ", ".join(interfaces()))
        run.on_setup("generating authority keys and torrcs")
        net.build(run.replicas)
        authorities = [
            run.start_support(argv, datadir, datadir / "stdout.log", datadir / "stderr.log")
            for nick, argv, datadir in net.authority_commands()
        ]
        routers = net.router_command()
        if routers:  # descriptor-only routers filling the directory, owned the same way
            argv, cwd = routers
            run.start_support(argv, cwd, cwd / "routers.stdout.log", cwd / "routers.stderr.log")
        started = time.monotonic()
        timeout = self.exp.scenario.consensus_timeout
        while True:
            run.reap_children()
            got = net.directory_ready()
            waited = time.monotonic() - started
            if got:
                net.consensus_at = time.time()
                with run.store.transaction():
                    run.store.add_event(
                        net.consensus_at,
                        "tor_consensus",
                        f"{len(net.authorities)} authorit{'y' if len(net.authorities) == 1 else 'ies'} published "
                        f"a consensus (valid-after {got[0]}) after {waited:.0f} s",
                    )
                for nick, argv, cwd in net.traffic_support():  # the sink and the groups' clients
                    run.start_support(argv, cwd, cwd / f"{nick}.stdout.log", cwd / f"{nick}.stderr.log")
                run.on_setup(f"consensus published after {waited:.0f} s; starting the relays")
                return None
            if run.stop_reason:
                return run.stop_reason
            if all(p.poll() is not None for p in authorities):
                why = f"every directory authority exited before a consensus: {net.authority_log_tail(1)}"
                break
            if waited > timeout:
                why = f"no consensus within {timeout:g} s: {net.authority_log_tail(1)}"
                break
            if self.exp.scenario.routers:
                rs = net.routers_status()
                listed = net.authority_consensus()
                run.on_setup(
                    f"waiting for a consensus listing the {self.exp.scenario.routers:,} routers: keys "
                    f"{rs.get('keys', 0):,}, descriptors accepted {rs.get('accepted', 0):,}, listed "
                    f"{max(0, listed[1] - len(net.authorities)) if listed else 0:,}; {waited:.0f} s / {timeout:g} s"
                )
            else:
                run.on_setup(f"waiting for the authorities' first consensus: {waited:.0f} s / {timeout:g} s")
            time.sleep(1.0)
        with run.store.transaction():
            run.store.add_event(time.time(), "tor_no_consensus", why)
        self.failed = why
        return "no tor consensus"

    def tick(self, run, now: float) -> None:
        net = self.network
        if net.relays_ready_at is None and net.relays_with_consensus() == len(net.relays):
            net.relays_ready_at = now
            run.store.add_event(
                now,
                "tor_relays_ready",
                f"all {len(net.relays)} relays hold a consensus, {now - run.started_wall:.0f} s after they started",
            )
        if net.directory_at is None and len(net.relays_holding_directory()) == len(net.relays):
            net.directory_at = now
            listed = max(h["listed"] for h in net.holding.values())
            run.store.add_event(
                now,
                "tor_directory_held",
                f"all {len(net.relays)} relays hold the directory (a consensus "
                f"of {listed:,} routers and their descriptors), {now - run.started_wall:.0f} s after they started",
            )
        if (
            self.exp.scenario.traffic
            and not self.traffic_started
            and (net.directory_at is not None or self.hold_over)
            and now - run.started_wall >= self.exp.phases.warmup
        ):  # the load begins: circuits with it
            self.traffic_started = True
            for name, argv, cwd in net.traffic_commands():
                run.start_support(argv, cwd, cwd / f"{nickname(name)}.stdout.log", cwd / f"{nickname(name)}.stderr.log")
            run.store.add_event(
                now,
                "tor_traffic",
                f"each group's client starts streams through its relays, "
                f"{self.exp.scenario.traffic:g} KB a second at most",
            )

    def holds_warmup(self, run, elapsed: float, now: float) -> bool:
        """The warm-up goes on past its planned end until every relay holds the directory
        (downloading thousands of descriptors is not the load under test), at most consensus_timeout
        longer."""
        net = self.network
        if net is None or net.directory_at is not None:
            return False
        if elapsed < self.exp.phases.warmup + self.exp.scenario.consensus_timeout:
            return True
        self.hold_over = True
        run.store.add_event(
            now,
            "tor_directory_incomplete",
            f"{len(net.holding)} of {len(net.relays)} relays held the "
            f"directory when the warm-up's hold ended ({self.exp.scenario.consensus_timeout:g} s past its plan)",
        )
        return False

    def teardown(self) -> None:
        if self.network is not None:
            self.network.namespace.leave()

    def finish(self, run, now: float) -> None:
        """The directory load each relay served (its load client's counts), as events and meta."""
        if self.network is None:
            return
        counts = self.network.load_counts()
        for r in run.replicas:
            c = counts.get(r.name) or {}
            run.store.add_event(
                now,
                "tor_load",
                f"{r.name}: {c.get('served', 0)} of {c.get('requests', 0)} directory "
                f"requests served ({c.get('diffs_served', 0)} consensus diffs, {c.get('bytes', 0):,} bytes)",
                r.id,
                r.group.name,
            )
        traffic = self.network.traffic_counts() if self.exp.scenario.traffic else {}
        for g, c in traffic.items():
            run.store.add_event(
                now,
                "tor_traffic",
                f"{g}: {c.get('streams', 0):,} streams through its relays "
                f"({c.get('failed', 0):,} failed) on {c.get('circuits', 0):,} circuits, "
                f"{c.get('bytes_down', 0) + c.get('bytes_up', 0):,} bytes",
                None,
                g,
            )
        run.store.set_meta(
            tor_network=json.dumps(
                {
                    "consensus_at": self.network.consensus_at,
                    "relays_ready_at": self.network.relays_ready_at,
                    "directory_at": self.network.directory_at,
                    "holding": self.network.holding,
                    "relays_listed": self.network.relays_listed(),
                    "load": counts,
                    "routers": self.network.routers_status(),
                    "consensus_bytes": self.network.consensus_bytes(),
                    "traffic": traffic,
                }
            )
        )

    def progress_column(self, replicas_by_group: dict[str, list]) -> tuple[str, dict[str, str]] | None:
        """Directory requests each group's relays served so far ("– (DirCache 0)" without a DirPort)."""
        if self.network is None:
            return None
        served = self.network.load_counts()
        column = {
            g: f"{sum((served.get(r.name) or {}).get('served', 0) for r in reps):,}"
            if self.has_load(reps[0])
            else "– (DirCache 0)"
            for g, reps in replicas_by_group.items()
        }
        if not self.exp.scenario.traffic:
            return "dir requests served", column
        streams = self.network.traffic_counts()
        return "dir requests served; streams", {
            g: f"{v}; {(streams.get(g) or {}).get('streams', 0):,}" for g, v in column.items()
        }

    def failure(self, run_dir: Path) -> UserError | None:
        if not self.failed:
            return None
        return UserError(
            f"the tor test network did not form ({self.failed}); kept in {run_dir}/{TOR_NETWORK_DIR}",
            "read the authorities' notice.log there; on a slow machine raise [scenario] consensus_timeout",
        )
