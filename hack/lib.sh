# shellcheck shell=bash
# Sourced (never run) by the hack/ scripts: the one home of the paths and helpers they share.
# shellcheck disable=SC2034  # the variables below are for the scripts that source this file
hack_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "$hack_dir/.." && pwd)"
cache_root="${LONGCTX_CACHE:-$HOME/.cache/longctx}"

log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# install_debian_packages PACKAGE...: apt-get installs those not installed yet (as root, else with
# sudo; the CI machines run as root). Prints nothing when all are there.
install_debian_packages() {
  local pkg missing=() sudo=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  ((${#missing[@]})) || return 0
  log "installing ${missing[*]}"
  ((EUID == 0)) || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# --- The local cluster (hack/cluster): its binaries' caches, processes and waits. ---
cluster_dir="$hack_dir/cluster"
# shellcheck source=cluster/versions.env
source "$cluster_dir/versions.env"

component_dir() { echo "$cache_root/$1-$2"; }

# Prints the bin/ folder holding all cluster binaries, one per component cache.
bin_dirs() {
  echo "$(component_dir kubernetes "$KUBERNETES_VERSION")/bin"
  echo "$(component_dir etcd "$ETCD_VERSION")/bin"
  echo "$(component_dir kwok "$KWOK_VERSION")/bin"
  echo "$(component_dir helm "$HELM_VERSION")/bin"
  echo "$(component_dir node "$KUBERNETES_VERSION")/bin"
  echo "$(component_dir coredns "$COREDNS_VERSION")/bin"
  echo "$(component_dir kueue "$KUEUE_VERSION")/bin"
}

cluster_path() { local IFS=:; local dirs; mapfile -t dirs < <(bin_dirs); echo "${dirs[*]}"; }

# The sandbox (pause) image of the real nodes and of kind's node image (hack/kind/node-image), built
# here from pause.c and cached by the hash of its sources.
pause_image() {
  local hash; hash="$(cat "$cluster_dir/pause/pause.c" "$cluster_dir/pause/image.py" | sha256sum | cut -c1-12)"
  local dir="$cache_root/pause-$hash"
  if [[ ! -f "$dir/pause.tar" ]]; then
    mkdir -p "$dir"
    gcc -static -Os -Wall -Wextra -o "$dir/pause" "$cluster_dir/pause/pause.c"
    python3 "$cluster_dir/pause/image.py" "$dir/pause" "localhost/longctx/pause:$hash" "$dir/pause.tar.partial"
    mv "$dir/pause.tar.partial" "$dir/pause.tar"
  fi
  echo "localhost/longctx/pause:$hash $dir/pause.tar"
}

# Sockets and runtime state of a cluster's real nodes (hack/cluster/real-nodes): under /run, since a
# unix socket path must stay under 108 bytes and a cluster's state folder may be a long tmp path.
real_nodes_run_dir() { echo "/run/longctx/$(sha256sum <<<"$1" | cut -c1-12)"; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

start() {  # start STATE NAME BINARY ARGS...: runs detached in its own session, output to STATE/logs/NAME.log
  local state="$1" name="$2"; shift 2
  setsid "$@" >"$state/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$state/pids/$name.pid"
}

wait_for() {  # wait_for SECONDS WHAT COMMAND...: fails after SECONDS, showing the logs of $state if set
  local deadline=$((SECONDS + $1)) what="$2"; shift 2
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS > deadline)); then
      log "timed out waiting for $what${state:+; logs in $state/logs}"
      [[ -z "${state:-}" ]] || tail -n 20 "$state"/logs/*.log >&2
      return 1
    fi
    sleep 0.2
  done
}

# --- The image build (hack/images). ---
# Everything lives under ~/.cache/longctx/images: buildah's storage (with its own storage.conf, so
# the host's containers configuration is never touched), debootstrap's .deb cache, the archives.
images_cache="${LONGCTX_IMAGES_CACHE:-$cache_root/images}"
export CONTAINERS_STORAGE_CONF="$images_cache/storage.conf"
# The Debian suite of the base image: Debian 13 trixie, whose python3 is 3.13 (JAX >= 0.11 needs
# Python >= 3.12; the host's bookworm has 3.11). Its mirror: the host's.
debian_suite=trixie
debian_mirror="$(sed -n 's/^URIs: *\(http[^ ]*\/debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)"
debian_mirror="${debian_mirror:-http://deb.debian.org/debian}"
