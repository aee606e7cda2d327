#!/usr/bin/env bash
# Installs the Debian 12 packages dispatch builds and tests with, and nothing
# else: prometheus-cpp-dev writes /metrics; prometheus brings promtool, which
# the test suite runs on a scrape (Debian also enables its prometheus service);
# chromium renders the status page headless in a test.
# etcd-server and etcd-client: the HA tests start their own etcd members on
# free loopback ports (Debian also enables an etcd service on 2379/2380 where
# systemd runs; the tests never use those ports).
# Does nothing (no apt-get at all) when every package is already present.
# Node.js and npm (for the second client, tests/protocol_client) come from
# Debian only when no `node` is on the PATH: a machine's own Node.js is kept.
set -euo pipefail

packages=(g++ cmake make pkg-config libuv1-dev capnproto libcapnp-dev zlib1g-dev libsqlite3-dev
          libgtest-dev googletest prometheus-cpp-dev prometheus chromium
          etcd-server etcd-client
          # The Python package (clients/python) and its tests.
          python3-dev pybind11-dev python3-cloudpickle python3-pytest python3-numpy python3-tqdm)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ! command -v node >/dev/null 2>&1; then
  missing+=(nodejs npm)
elif ! command -v npm >/dev/null 2>&1; then
  missing+=(npm)
fi

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "bootstrap: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
