#!/usr/bin/env bash
# Makes `import dispatch` work for Debian's python3 (/usr/bin/python3): installs
# what is missing, builds the package into build/python, and puts that folder
# on python3's path with a .pth file in its site-packages (an editable install:
# a rebuild is picked up without installing again). Prints where it wrote.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target dispatch_python dispatcher dispatch-worker >/dev/null
site=$(/usr/bin/python3 -c 'import site; print(site.getsitepackages()[0])')
sudo=""
if [ "$(id -u)" -ne 0 ] && [ ! -w "$site" ]; then sudo="sudo"; fi
$sudo mkdir -p "$site"
echo "$(pwd)/build/python" | $sudo tee "$site/dispatch.pth" >/dev/null
/usr/bin/python3 -c 'import dispatch; print("dispatch", dispatch.__version__, "from", dispatch.__file__)'
echo "install-python: wrote $site/dispatch.pth"
