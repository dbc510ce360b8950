# Shared settings for hack/cluster scripts (sourced, not executed).
cluster_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "$cluster_dir/../.." && pwd)"
# shellcheck source=versions.env
source "$cluster_dir/versions.env"
cache_root="${LONGCTX_CACHE:-$HOME/.cache/longctx}"

# Go must never download a toolchain, and the checksum database is unreachable here.
export GOTOOLCHAIN=local GOSUMDB=off GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0

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

log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

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
