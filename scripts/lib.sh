# Shared by scripts/xferlua, scripts/test and scripts/bench: install what is missing,
# configure and build. Source it; it changes to the project root.
set -euo pipefail
XFER_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$XFER_ROOT"

# Debian packages the build and the specs need.
XFER_PACKAGES="cmake make gcc libc6-dev pkg-config luajit libluajit-5.1-dev lua-busted
  ocl-icd-opencl-dev opencl-headers pocl-opencl-icd libvulkan-dev mesa-vulkan-drivers glslc
  vulkan-validationlayers python3-numpy luarocks libucx-dev ucx-utils liburing-dev zlib1g-dev
  lua-dkjson lua-argparse python3-venv python3-setuptools python3-dev python3-wheel python3-pip curl
  patch"

xfer_log() { printf '%s\n' "$*" >&2; }

# Installs the packages of XFER_PACKAGES that are not installed (apt-get; sudo when not root).
xfer_install_deps() {
  # XFER_SKIP_INSTALL=1: the packages are there without dpkg knowing (unpacked by hand,
  # as on the GPU machine), or the caller manages them.
  [ "${XFER_SKIP_INSTALL:-0}" = 1 ] && return 0
  local missing=() pkg
  for pkg in $XFER_PACKAGES; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { xfer_log "xferlua: need root or sudo to install: ${missing[*]}"; return 1; }
    sudo="sudo"
  fi
  xfer_log "xferlua: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >/dev/null
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# xfer_build DIR [cmake options...]: configures DIR once, then builds it. Quiet unless
# something fails, when the whole log is shown.
xfer_build() {
  local dir=$1; shift
  local log; log=$(mktemp)
  # configured once, unless that configure failed (a cache and no Makefile: a package was
  # missing then; cmake looks again for what it did not find)
  if { [ -f "$dir/CMakeCache.txt" ] && [ -f "$dir/Makefile" ] || cmake -S . -B "$dir" "$@" >"$log" 2>&1; } &&
     cmake --build "$dir" -j "$(nproc)" >"$log" 2>&1; then
    rm -f "$log"
  else
    cat "$log" >&2; rm -f "$log"
    xfer_log "xferlua: the build in $dir failed"
    return 1
  fi
}
