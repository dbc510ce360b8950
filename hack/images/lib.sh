# Sourced by hack/images/{deps,build,base-rootfs}: the one home of the image build's paths.
# Everything lives under ~/.cache/longctx/images: buildah's storage (with its own storage.conf, so
# the host's containers configuration is never touched), debootstrap's .deb cache, the archives.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
images_cache="${LONGCTX_IMAGES_CACHE:-$HOME/.cache/longctx/images}"
export CONTAINERS_STORAGE_CONF="$images_cache/storage.conf"
# The Debian suite of the base image: Debian 13 trixie, whose python3 is 3.13 (JAX >= 0.11 needs
# Python >= 3.12; the host's bookworm has 3.11). Its mirror: the host's.
debian_suite=trixie
debian_mirror="$(sed -n 's/^URIs: *\(http[^ ]*\/debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)"
debian_mirror="${debian_mirror:-http://deb.debian.org/debian}"
images_log() { echo "hack/images: $*" >&2; }
