#!/usr/bin/env bash
# Installs what alloclab needs on a fresh Debian machine, into .venv beside this script's repo.
#   bash scripts/install.sh          # the tool: compilers, allocator libraries, Python package
#   bash scripts/install.sh --test   # the same plus the test dependencies
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

# Debian packages: a compiler for the native workloads and probe, the static libc for the
# "statically linked" verification case, and the allocators the demo compares.
PKGS="gcc g++ make cmake dpkg-dev libc6-dev libzstd-dev python3 python3-venv python3-pip libjemalloc2 libmimalloc2.0 libtcmalloc-minimal4 libunwind8"
# the tor-network scenario (and its tests) run Debian's tor and tor-gencert
PKGS="$PKGS tor"
# crates are fetched with cargo: a Rust toolchain already on the machine will do, else Debian's
command -v cargo >/dev/null || PKGS="$PKGS cargo"
# the tests check every generated unit file with systemd's own parser (systemd-analyze verify)
[ "${1:-}" = "--test" ] && PKGS="$PKGS systemd"
# ... and a real Prometheus server scrapes the collectors and serves the import (tests/integration/test_prometheus.py)
[ "${1:-}" = "--test" ] && PKGS="$PKGS prometheus"
# the multi-host tests drive hosts over real SSH: Debian's sshd, one per network namespace (tests/integration/ansible_fleet.py)
[ "${1:-}" = "--test" ] && PKGS="$PKGS openssh-server openssh-client iproute2"
# ... as a user with sudo, onto hosts that get alloclab's light install (Debian's packages for the fleet verbs)
[ "${1:-}" = "--test" ] && PKGS="$PKGS sudo python3-click python3-rich python3-prometheus-client"
# the HTML report is opened in a real headless browser by the tests
[ "${1:-}" = "--test" ] && PKGS="$PKGS chromium"
# `report`, `compare` and `run` are looked at in a real 80-column terminal (tests/integration/test_terminal_80.py)
[ "${1:-}" = "--test" ] && PKGS="$PKGS tmux"
missing=""
for p in $PKGS; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"; done
if [ -n "$missing" ]; then
  echo "installing Debian packages:$missing"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
  # the tests start their own sshd inside namespaces; the package's own service is not wanted
  case " $missing " in
    *" openssh-server "*) [ -d /run/systemd/system ] && $SUDO systemctl disable --now ssh.service ssh.socket >/dev/null 2>&1 || true ;;
  esac
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
if [ "${1:-}" = "--test" ]; then
  .venv/bin/python -m pip install -q -e '.[fleet,test]'
else
  # with ansible-core: this machine can be the controller of a fleet (ansible/README.md)
  .venv/bin/python -m pip install -q -e '.[fleet]'
fi
echo "alloclab installed: $(.venv/bin/alloclab --help >/dev/null && echo .venv/bin/alloclab)"
if [ "${1:-}" = "--test" ]; then
  # what the suite builds (allocators from registries, Rust programs that embed one), built once
  # now, two at a time and within a budget of its own, instead of inside one test's timeout
  .venv/bin/python -m tests.prebuild --budget "${ALLOCLAB_PREBUILD_BUDGET:-1500}"
fi
