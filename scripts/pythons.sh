#!/usr/bin/env bash
# Today's CPythons (3.13 latest patch, 3.14, 3.15) for the test matrix and the
# benchmarks, provisioned by the project itself.
#
#   scripts/pythons.sh provision       make or refresh the root (idempotent;
#                                      a second run takes about a second)
#   scripts/pythons.sh versions        print "3.13 3.14 3.15 " for those that
#                                      run there (nothing if not provisioned)
#   scripts/pythons.sh run CMD...      run CMD in the root, in /src: a copy of
#                                      this project synced from the work tree
#   scripts/pythons.sh available       exit 0 if this machine can provision
#                                      (root, Debian apt or debootstrap)
#   scripts/pythons.sh mirror          print the Debian mirror apt uses here
#   scripts/pythons.sh src             print where `run` keeps this work tree's
#                                      copy, seen from here (what a run built
#                                      there stays there: make dist fetches it)
#
# Why a chroot: Debian's unstable suite ships CPython 3.13.x, 3.14.x and
# 3.15.x as binary packages, but they need a newer glibc than Debian 12's, so
# they cannot be unpacked into the host. A minimal Debian unstable root made
# with debootstrap runs them unchanged. The root lives outside the project
# (AIOSUBINTERP_SID_ROOT, default ~/.cache/aiosubinterp/sid) so fresh clones
# and CI runs on the same machine reuse it; its pip cache and the venvs of
# /src are kept there too.
#
# Mounts (proc, dev, dev/shm, dev/pts, sys, the project) exist only while a `run`
# runs and are undone on every exit path; concurrent runs (of several work
# trees) share the system mounts and each gets its own copy under /src.
set -euo pipefail

ROOT="${AIOSUBINTERP_SID_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/aiosubinterp/sid}"
VERSIONS=(3.13 3.14 3.15)
PROJECT="$(cd "$(dirname "$0")/.." && pwd)"
# Bumped when the package list changes: a root with an older stamp is refreshed.
# libpython3.X-testsuite: CPython's own tests, run against our executor.
STAMP_CONTENT="v2 ${VERSIONS[*]}"

packages() {
    local p="gcc,make,libc6-dev,git,ca-certificates,rsync,procps"
    for v in "${VERSIONS[@]}"; do
        p+=",python$v,python$v-dev,python$v-venv,libpython$v-testsuite"
    done
    echo "$p"
}

die() {
    echo "pythons.sh: $*" >&2
    exit 1
}

can_provision() {
    [[ "$(id -u)" == 0 ]] || return 1
    command -v debootstrap >/dev/null 2>&1 && return 0
    command -v apt-get >/dev/null 2>&1
}

# The mirror apt already uses on this machine (never a hard-coded host).
mirror() {
    local m=""
    if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
        m="$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources)"
    fi
    if [[ -z "$m" && -f /etc/apt/sources.list ]]; then
        m="$(awk '$1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; exit}}' /etc/apt/sources.list)"
    fi
    [[ -n "$m" ]] || die "no Debian mirror found in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list"
    echo "$m"
}

provisioned() {
    [[ -f "$ROOT/.aiosubinterp-stamp" && "$(cat "$ROOT/.aiosubinterp-stamp")" == "$STAMP_CONTENT" ]]
}

# Files the root needs from the host: name resolution, the CA bundle pip
# verifies the registry with, and the host's pip settings.
copy_host_files() {
    cp /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true
    if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
        mkdir -p "$ROOT/etc/ssl/certs"
        cp /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/certs/ca-certificates.crt"
    fi
    if [[ -f /etc/pip.conf ]]; then cp /etc/pip.conf "$ROOT/etc/pip.conf"; fi
}

provision() {
    mkdir -p "$(dirname "$ROOT")"
    exec 8>"$ROOT.provision.lock"
    flock 8  # one provisioning at a time; a second waits, then finds it done
    if provisioned; then
        copy_host_files
        return 0
    fi
    can_provision || die "needs root and apt-get or debootstrap (a Debian or Ubuntu machine)"
    if ! command -v debootstrap >/dev/null 2>&1; then
        echo "pythons.sh: installing debootstrap"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    fi
    local m
    m="$(mirror)"
    if [[ -x "$ROOT/usr/bin/apt-get" ]]; then
        # A root from an earlier package list: add what is missing. The
        # mirror may be a dated snapshot whose Release file has "expired".
        echo "pythons.sh: refreshing $ROOT"
        copy_host_files
        local pkgs
        pkgs="$(packages | tr , ' ')"
        with_mounts chroot "$ROOT" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
            bash -c "apt-get -o Acquire::Check-Valid-Until=false update -qq && apt-get install -y -qq $pkgs >/dev/null"
    else
        echo "pythons.sh: creating a Debian unstable root in $ROOT from $m (about a minute)"
        rm -rf "$ROOT"
        mkdir -p "$ROOT"
        debootstrap --variant=minbase --include="$(packages)" sid "$ROOT" "$m" >"$ROOT.debootstrap.log" 2>&1 \
            || { tail -20 "$ROOT.debootstrap.log" >&2; die "debootstrap failed (log: $ROOT.debootstrap.log)"; }
        copy_host_files
    fi
    for v in "${VERSIONS[@]}"; do
        [[ -x "$ROOT/usr/bin/python$v" ]] || die "python$v missing in $ROOT after provisioning"
    done
    echo "$STAMP_CONTENT" >"$ROOT/.aiosubinterp-stamp"
    for v in "${VERSIONS[@]}"; do
        echo "  python$v: $(chroot "$ROOT" "/usr/bin/python$v" -VV | head -1)"
    done
}

# The system mounts (proc, dev, dev/shm, dev/pts, sys) are shared by concurrent runs:
# the pids of the runs using them are listed in $ROOT.users, the first run
# mounts, the last one unmounts (pids of runs that died are pruned). Each run
# binds its own project tree at /mnt/project-TAG and syncs it to /src/TAG.
SYSTEM_MOUNTS=(/sys /dev/pts /dev/shm /dev /proc)  # unmount order
PROJECT_MOUNT=""

mount_system() {
    local t
    mkdir -p "$ROOT/proc" "$ROOT/dev" "$ROOT/sys"
    mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
    mountpoint -q "$ROOT/dev" || mount --bind /dev "$ROOT/dev"
    mountpoint -q "$ROOT/dev/shm" || mount -t tmpfs tmpfs "$ROOT/dev/shm"
    mountpoint -q "$ROOT/dev/pts" || mount --bind /dev/pts "$ROOT/dev/pts"
    mountpoint -q "$ROOT/sys" || mount --bind /sys "$ROOT/sys"
}

unmount_path() {
    mountpoint -q "$1" || return 0
    umount "$1" 2>/dev/null || umount -l "$1" 2>/dev/null || echo "pythons.sh: could not unmount $1" >&2
}

# Under the lock: rewrite $ROOT.users without dead pids and without $1 (if
# given); print how many remain.
prune_users() {
    local pid keep=()
    if [[ -f "$ROOT.users" ]]; then
        while read -r pid; do
            [[ -n "$pid" && "$pid" != "${1:-}" ]] && kill -0 "$pid" 2>/dev/null && keep+=("$pid")
        done <"$ROOT.users"
    fi
    printf '%s\n' "${keep[@]}" | grep -v '^$' >"$ROOT.users" || true
    echo "${#keep[@]}"
}

enter_root() {
    (
        flock 9
        prune_users >/dev/null
        mount_system
        echo "$$" >>"$ROOT.users"
    ) 9>"$ROOT.lock"
}

leave_root() {
    if [[ -n "$PROJECT_MOUNT" ]]; then
        unmount_path "$PROJECT_MOUNT"
        rmdir "$PROJECT_MOUNT" 2>/dev/null || true
        PROJECT_MOUNT=""
    fi
    (
        flock 9
        if [[ "$(prune_users "$$")" == 0 ]]; then
            local t
            for t in "${SYSTEM_MOUNTS[@]}"; do unmount_path "$ROOT$t"; done
        fi
    ) 9>"$ROOT.lock"
}

# Runs "$@" with the root's mounts in place (and the project bound at
# /mnt/project-$TAG when $TAG is set); undoes them however it ends.
with_mounts() {
    trap leave_root EXIT
    trap 'leave_root; exit 130' INT
    trap 'leave_root; exit 143' TERM
    enter_root
    if [[ -n "${TAG:-}" ]]; then
        PROJECT_MOUNT="$ROOT/mnt/project-$TAG"
        mkdir -p "$PROJECT_MOUNT"
        mount --bind "$PROJECT" "$PROJECT_MOUNT"
    fi
    local rc=0
    "$@" || rc=$?
    leave_root
    trap - EXIT INT TERM
    return "$rc"
}

# Environment passed into the root: a clean one plus what steers the build
# and the tests.
chroot_env() {
    local -a e=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8)
    local name
    for name in CI PYTHONDONTWRITEBYTECODE PYTEST_ARGS BENCH_ARGS TEST_WALL_TIMEOUT \
        AIOSUBINTERP_DEBUG AIOSUBINTERP_SANITIZE AIOSUBINTERP_FIGURES PIP_INDEX_URL PIP_EXTRA_INDEX_URL; do
        if [[ -n "${!name+x}" ]]; then e+=("$name=${!name}"); fi
    done
    printf '%s\0' "${e[@]}"
}

# One copy of the project per work tree in the root: /src/TAG, TAG being the
# tree's name plus a hash of its path.
tag() {
    echo "$(basename "$PROJECT")-$(printf '%s' "$PROJECT" | cksum | cut -d' ' -f1)"
}

run() {
    [[ $# -gt 0 ]] || die "run: no command given"
    provisioned || die "not provisioned: run scripts/pythons.sh provision first"
    [[ "$(id -u)" == 0 ]] || die "run: needs root (chroot)"
    copy_host_files
    local -a env
    mapfile -d '' env < <(chroot_env)
    # /src is the project as the work tree has it (uncommitted changes
    # included), minus the host's build products: venvs and the extension
    # built against the host's glibc. Its own venvs and build stay between runs.
    TAG="$(tag)"
    with_mounts chroot "$ROOT" env -i "${env[@]}" bash -c '
        set -e
        tag="$1"; shift
        mkdir -p "/src/$tag"
        rsync -a --delete --exclude="/.venv-*" --exclude="/src/aiosubinterp/*.so" --exclude="/build" \
            --exclude="*.egg-info" --exclude="/ext/_core.c" --exclude="/ext/_core.html" \
            --exclude="__pycache__" --exclude=".git" "/mnt/project-$tag/" "/src/$tag/"
        cd "/src/$tag"
        exec "$@"' bash "$TAG" "$@"
}

versions() {
    provisioned || return 0
    local v
    for v in "${VERSIONS[@]}"; do
        if [[ -x "$ROOT/usr/bin/python$v" ]]; then printf '%s ' "$v"; fi
    done
    echo
}

case "${1:-}" in
    provision) provision ;;
    run) shift; run "$@" ;;
    versions) versions ;;
    available) can_provision ;;
    root) echo "$ROOT" ;;
    mirror) mirror ;;
    src) echo "$ROOT/src/$(tag)" ;;
    *) echo "usage: $0 provision | versions | available | root | mirror | src | run CMD..." >&2; exit 2 ;;
esac
