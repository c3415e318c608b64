#!/usr/bin/env bash
# Install Podman (Debian 12) and build local test images, for tests that need a real
# container engine on a machine without a Docker daemon and without registry access.
#
# Run as root. Usage:
#   tools/containers/setup-podman.sh [busybox] [debian] [python]   (default: busybox)
#     busybox -> localhost/testbase-busybox:1  (static busybox, ~2 MB, < 1 s)
#     debian  -> localhost/testbase:1          (debootstrap minbase, ~210 MB, ~30 s)
#     python  -> localhost/testpy:1            (minbase + python3-minimal, ~40 s)
#
# What this machine needs (found on the Firecracker-style Debian 12 sandbox VM, kernel 6.18,
# hybrid cgroup v1 + v2, root without CAP_SYS_RESOURCE, no systemd):
#   - runtime runc: crun 1.8 refuses hybrid cgroups ("cgroups in hybrid mode not supported,
#     drop all controllers from cgroupv2"), also with --cgroups=disabled; runc refuses
#     --cgroups=disabled, so cgroups stay on (cgroupfs manager).
#   - explicit default_ulimits: rootful podman asks for nofile/nproc = 1048576, and without
#     CAP_SYS_RESOURCE runc fails "error setting rlimit type 7 (or 6): operation not
#     permitted". conmon runs the runtime with nproc <= 32768 here, hence the cap.
set -euo pipefail

[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
want=("$@"); [ ${#want[@]} -gt 0 ] || want=(busybox)
has() { local w; for w in "${want[@]}"; do [ "$w" = "$1" ] && return 0; done; return 1; }
t0=$(date +%s)
log() { echo "[setup-podman +$(( $(date +%s) - t0 ))s] $*"; }

# ---- 1. packages ----------------------------------------------------------------------
pkgs=(podman runc catatonit)   # catatonit: what `podman run --init` runs as PID 1
has busybox && pkgs+=(busybox-static)
{ has debian || has python; } && pkgs+=(debootstrap)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  log "apt-get install ${missing[*]}"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
fi

# ---- 2. configuration -----------------------------------------------------------------
hn=$(ulimit -Hn); hu=$(ulimit -Hu)
[ "$hn" = unlimited ] && hn=1048576
[ "$hu" = unlimited ] && hu=32768
[ "$hu" -gt 32768 ] && hu=32768
[ "$hn" -gt 1048576 ] && hn=1048576
mkdir -p /etc/containers
cat > /etc/containers/containers.conf <<CONF
# written by tools/containers/setup-podman.sh
[containers]
default_ulimits = [
  "nofile=${hn}:${hn}",
  "nproc=${hu}:${hu}",
]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
log "wrote /etc/containers/containers.conf (nofile=$hn nproc=$hu, runtime runc)"

# ---- 3. images (no registry: rootfs tarballs through `podman import`) -----------------
mirror=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian

import_dir() {  # import_dir DIR TAG
  tar -C "$1" -c . | podman import -q --change 'CMD ["/bin/sh"]' - "$2" >/dev/null
  log "imported $2"
}

if has busybox && ! podman image exists localhost/testbase-busybox:1; then
  d=$(mktemp -d)
  mkdir -p "$d"/{bin,etc,tmp,proc,sys,dev,root}
  cp /bin/busybox "$d/bin/busybox"
  for a in $("$d/bin/busybox" --list); do [ "$a" = busybox ] || ln -sf busybox "$d/bin/$a"; done
  echo 'root:x:0:0:root:/root:/bin/sh' > "$d/etc/passwd"
  echo 'root:x:0:' > "$d/etc/group"
  chmod 1777 "$d/tmp"
  import_dir "$d" localhost/testbase-busybox:1
  rm -rf "$d"
fi

if has debian && ! podman image exists localhost/testbase:1; then
  d=$(mktemp -d)
  log "debootstrap minbase from $mirror"
  debootstrap --variant=minbase bookworm "$d" "$mirror" >/dev/null
  rm -rf "$d"/var/cache/apt/archives/*.deb "$d"/var/lib/apt/lists/*
  import_dir "$d" localhost/testbase:1
  rm -rf "$d"
fi

if has python && ! podman image exists localhost/testpy:1; then
  d=$(mktemp -d)
  log "debootstrap minbase + python3-minimal from $mirror"
  debootstrap --variant=minbase --include=python3-minimal bookworm "$d" "$mirror" >/dev/null
  rm -rf "$d"/var/cache/apt/archives/*.deb "$d"/var/lib/apt/lists/*
  import_dir "$d" localhost/testpy:1
  rm -rf "$d"
fi

# ---- 4. self-check: mount, env, workdir, --init, SIGUSR1 through the client -----------
img=$(podman images -q --filter reference=localhost/testbase-busybox:1 | head -1)
[ -n "$img" ] || img=$(podman images -q --filter reference=localhost/testbase:1 | head -1)
[ -n "$img" ] || img=$(podman images -q --filter reference=localhost/testpy:1 | head -1)
w=$(mktemp -d)
cat > "$w/trap.sh" <<'SH'
trap 'echo "usr1 FOO=$FOO pwd=$(pwd)" > usr1.txt; exit 7' USR1
echo ready > ready.txt
while :; do sleep 0.1; done
SH
FOO=bar podman run --rm --init --network host --ipc host -v "$w:$w" -e FOO -w "$w" \
  "$img" sh trap.sh &
pid=$!
for _ in $(seq 100); do [ -f "$w/ready.txt" ] && break; sleep 0.1; done
kill -USR1 "$pid"
rc=0; wait "$pid" || rc=$?
got=$(cat "$w/usr1.txt" 2>/dev/null || true)
rm -rf "$w"
if [ "$rc" = 7 ] && [ "$got" = "usr1 FOO=bar pwd=$w" ]; then
  log "self-check ok: podman $(podman version --format '{{.Client.Version}}'), image $img"
else
  echo "self-check FAILED: rc=$rc got='$got'" >&2; exit 1
fi
