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
}

cluster_path() { local IFS=:; local dirs; mapfile -t dirs < <(bin_dirs); echo "${dirs[*]}"; }

log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# Sockets and runtime state of a cluster's real nodes (hack/cluster/real-nodes): under /run, since a
# unix socket path must stay under 108 bytes and a cluster's state folder may be a long tmp path.
real_nodes_run_dir() { echo "/run/longctx/$(sha256sum <<<"$1" | cut -c1-12)"; }
