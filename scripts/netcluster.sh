#!/usr/bin/env bash
# netcluster.sh: a cluster of K "nodes" on one Linux machine.
#
# Each node is a network namespace with its own UTS namespace (its own
# hostname), its own mount namespace (its own kernel boot id, so UCX and
# nspcomm both see a different machine) and one veth uplink to a bridge in a
# hub namespace. Every uplink is shaped with tc in both directions (a token
# bucket at --rate; a netem delay of --delay where the kernel has sch_netem).
# Addresses are in 198.18.0.0/24 (the benchmarking range), inside namespaces
# this script creates; nothing is routed outside them.
#
#   netcluster.sh up   [-p PREFIX] [-k K] [-r RATE] [-d DELAY_US]
#   netcluster.sh exec [-p PREFIX] [-c CPUS] NODE CMD...   (NODE: 0..K-1, or hub)
#   netcluster.sh down [-p PREFIX]
#   netcluster.sh run  [-p PREFIX] [-k K] [-r RATE] [-d DELAY_US] [-c CPUS] CMD...
#   netcluster.sh shape [-p PREFIX] -r RATE      (reshape every uplink)
#   netcluster.sh status [-p PREFIX]
#
# `run` brings the cluster up, runs CMD in the hub namespace with
# NSP_NETCLUSTER set (see below), and tears everything down when CMD ends or
# the script is interrupted or fails. `up` is idempotent (an existing cluster
# of that prefix is torn down first); `down` is safe to run twice.
#
# What a program sees: NSP_NETCLUSTER=STATE_DIR, the cluster's state
# directory: nodes (K), rate, delay_us, and per node i the files
# n<i>.net (the network namespace), n<i>.uts, n<i>.mnt (bind-mounted
# namespaces). A forking launcher puts rank r on node r / (nranks / K) by
# entering those namespaces in the child (tools/nc_enter.c). Across
# nodes a program meets through NSPCOMM_ROOT=198.18.0.254:PORT (the hub) or
# the address of node 0, 198.18.0.1, with NSPCOMM_SOCKET_IFNAME=eth0.
#
# -c CPUS (a CPU list, e.g. 0,1): one core per rank. `run` exports
# NSP_LAUNCH_CPUS=CPUS, so the forking launchers pin rank r to the
# (r mod n)-th CPU of the list (tools/nsp_launch.h); `exec` runs CMD under
# `taskset -c CPUS`.
#
# Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN); exits 77 with the reason
# otherwise (the automake code for "skipped").
set -euo pipefail

NC_ROOT=/run/nspnc
PREFIX=${NSP_NC_PREFIX:-nspnc-}
K=2
RATE=2gbit
DELAY_US=50
CPUS=""

die() { echo "netcluster: $*" >&2; exit 1; }

need_root() {
    if [ "$(id -u)" != 0 ]; then
        echo "netcluster: needs root (network, UTS and mount namespaces, tc)" >&2
        exit 77
    fi
    for tool in ip tc unshare nsenter mount; do
        command -v "$tool" >/dev/null 2>&1 || { echo "netcluster: $tool not found" >&2; exit 77; }
    done
}

parse_opts() {
    OPTIND=1
    while getopts "p:k:r:d:c:" opt; do
        case $opt in
        c) CPUS=$OPTARG ;;
        p) PREFIX=$OPTARG ;;
        k) K=$OPTARG ;;
        r) RATE=$OPTARG ;;
        d) DELAY_US=$OPTARG ;;
        *) die "unknown option (see the header of $0)" ;;
        esac
    done
    SHIFT=$((OPTIND - 1))
    case $PREFIX in *[!A-Za-z0-9-]* | "") die "prefix '$PREFIX': letters, digits, '-' only" ;; esac
    [ ${#PREFIX} -le 10 ] || die "prefix '$PREFIX' longer than 10 (interface names have 15)"
    case $K in '' | *[!0-9]*) die "-k $K: need a node count" ;; esac
    [ "$K" -ge 1 ] && [ "$K" -le 64 ] || die "-k $K: need 1..64 nodes"
    case $DELAY_US in '' | *[!0-9]*) die "-d $DELAY_US: need microseconds" ;; esac
    case $CPUS in *[!0-9,-]*) die "-c $CPUS: a CPU list such as 0,1 or 0-3" ;; esac
    STATE=$NC_ROOT/$PREFIX
}

ns() { echo "${PREFIX}$1"; }

# Shape egress of dev in namespace $1: token bucket at RATE, netem delay below it.
shape_dev() {
    local netns=$1 dev=$2
    tc -n "$netns" qdisc del dev "$dev" root 2>/dev/null || true
    # burst: 1 ms at the rate, at least 64 KiB (a TSO segment); queue 20 ms
    tc -n "$netns" qdisc add dev "$dev" root handle 1: tbf rate "$RATE" \
        burst "$(burst_bytes)" latency 20ms
    if [ "$DELAY_US" -gt 0 ]; then
        if ! tc -n "$netns" qdisc add dev "$dev" parent 1:1 handle 10: netem \
            delay "${DELAY_US}us" 2>/dev/null; then
            echo "netcluster: no sch_netem in this kernel: links get no added delay" >&2
            DELAY_US=0
            echo 0 >"$STATE/delay_us"
        fi
    fi
}

# tbf burst in bytes: the rate's bytes in 1 ms, at least 64 KiB.
burst_bytes() {
    local bits
    bits=$(echo "$RATE" | sed -e 's/[gG]bit$/000000000/' -e 's/[mM]bit$/000000/' -e 's/[kK]bit$/000/')
    case $bits in *[!0-9]*) die "-r $RATE: use Nkbit, Nmbit or Ngbit" ;; esac
    local b=$((bits / 8 / 1000))
    [ "$b" -ge 65536 ] || b=65536
    echo "$b"
}

node_up() {
    local i=$1 n hubport
    n=$(ns "n$i")
    hubport="${PREFIX}${i}h"
    ip netns add "$n"
    ln -sf "/run/netns/$n" "$STATE/n$i.net"
    ip link add "${PREFIX}${i}n" type veth peer name "$hubport"
    ip link set "${PREFIX}${i}n" netns "$n"
    ip link set "$hubport" netns "$(ns hub)"
    ip -n "$n" link set "${PREFIX}${i}n" name eth0
    ip -n "$n" addr add "198.18.0.$((i + 1))/24" dev eth0
    ip -n "$n" link set lo up
    ip -n "$n" link set eth0 up
    ip -n "$(ns hub)" link set "$hubport" master br0
    ip -n "$(ns hub)" link set "$hubport" up
    shape_dev "$n" eth0
    shape_dev "$(ns hub)" "$hubport"
    # its own hostname and boot id, kept in bind-mounted namespaces
    : >"$STATE/n$i.uts"
    : >"$STATE/n$i.mnt"
    cat /proc/sys/kernel/random/uuid >"$STATE/n$i.boot_id"
    unshare --uts="$STATE/n$i.uts" --mount="$STATE/n$i.mnt" --propagation private \
        sh -c "hostname '${PREFIX}n$i' && mount --bind '$STATE/n$i.boot_id' \
               /proc/sys/kernel/random/boot_id"
}

cmd_up() {
    need_root
    cmd_down >/dev/null 2>&1 || true
    mkdir -p "$STATE"
    trap 'cmd_down >/dev/null 2>&1; exit 1' ERR INT TERM
    # bind-mount the state directory onto itself, private, so namespace
    # files can be bind-mounted in it (unshare --uts=FILE / --mount=FILE)
    mount --bind "$STATE" "$STATE"
    mount --make-private "$STATE"
    echo "$K" >"$STATE/nodes"
    echo "$RATE" >"$STATE/rate"
    echo "$DELAY_US" >"$STATE/delay_us"
    ip netns add "$(ns hub)"
    ip -n "$(ns hub)" link add br0 type bridge
    ip -n "$(ns hub)" addr add 198.18.0.254/24 dev br0
    ip -n "$(ns hub)" link set lo up
    ip -n "$(ns hub)" link set br0 up
    for i in $(seq 0 $((K - 1))); do node_up "$i"; done
    trap - ERR INT TERM
    echo "$STATE"
}

# Kill what still runs inside a network namespace, then delete it.
ns_del() {
    local n=$1 pids
    pids=$(ip netns pids "$n" 2>/dev/null || true)
    if [ -n "$pids" ]; then
        # shellcheck disable=SC2086
        kill -KILL $pids 2>/dev/null || true
        sleep 0.1
    fi
    ip netns del "$n" 2>/dev/null || true
}

cmd_down() {
    need_root
    local f
    if [ -d "$STATE" ]; then
        for f in "$STATE"/n*.net; do
            [ -e "$f" ] || [ -L "$f" ] || continue
            ns_del "$(basename "$(readlink "$f")")"
        done
        for f in "$STATE"/*.uts "$STATE"/*.mnt; do
            [ -e "$f" ] && umount "$f" 2>/dev/null || true
        done
        umount "$STATE" 2>/dev/null || true
        rm -rf "$STATE"
    fi
    # leftovers of a run that died before writing its state
    for f in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${PREFIX}" || true); do
        ns_del "$f"
    done
    ip netns del "$(ns hub)" 2>/dev/null || true
}

cmd_exec() {
    need_root
    local node=$1
    shift
    [ -d "$STATE" ] || die "no cluster '$PREFIX' (run: $0 up -p $PREFIX)"
    export NSP_NETCLUSTER=$STATE
    local pin=()
    [ -z "$CPUS" ] || pin=(taskset -c "$CPUS")
    if [ "$node" = hub ]; then
        # not `ip netns exec`: its private mount namespace hides the nodes'
        # bind-mounted namespace files from a launcher that enters them
        exec nsenter --net="/run/netns/$(ns hub)" -- "${pin[@]}" "$@"
    fi
    [ -e "$STATE/n$node.uts" ] || die "no node $node in cluster '$PREFIX'"
    # entering the mount namespace resets the working directory: go back
    exec nsenter --net="/run/netns/$(ns "n$node")" --uts="$STATE/n$node.uts" \
        --mount="$STATE/n$node.mnt" -- "${pin[@]}" sh -c 'cd "$1" && shift && exec "$@"' sh \
        "$PWD" "$@"
}

cmd_status() {
    [ -d "$STATE" ] || { echo "no cluster '$PREFIX'"; return 1; }
    echo "cluster $PREFIX: $(cat "$STATE/nodes") nodes, rate $(cat "$STATE/rate"), delay $(cat "$STATE/delay_us") us"
    ip netns list | grep "^${PREFIX}" || true
}

cmd_shape() {
    need_root
    [ -d "$STATE" ] || die "no cluster '$PREFIX'"
    K=$(cat "$STATE/nodes")
    DELAY_US=$(cat "$STATE/delay_us")
    echo "$RATE" >"$STATE/rate"
    for i in $(seq 0 $((K - 1))); do
        shape_dev "$(ns "n$i")" eth0
        shape_dev "$(ns hub)" "${PREFIX}${i}h"
    done
}

cmd_run() {
    local rc=0
    cmd_up >/dev/null
    trap 'cmd_down >/dev/null 2>&1' EXIT
    trap 'exit 130' INT TERM
    [ -z "$CPUS" ] || export NSP_LAUNCH_CPUS=$CPUS
    NSP_NETCLUSTER=$STATE nsenter --net="/run/netns/$(ns hub)" -- "$@" || rc=$?
    return "$rc"
}

main() {
    [ $# -ge 1 ] || die "usage: $0 up|exec|down|run|shape|status [options] (see its header)"
    local verb=$1
    shift
    parse_opts "$@"
    shift "$SHIFT"
    case $verb in
    up) cmd_up ;;
    down) cmd_down ;;
    exec) [ $# -ge 2 ] || die "exec NODE CMD..."; cmd_exec "$@" ;;
    run) [ $# -ge 1 ] || die "run CMD..."; need_root; cmd_run "$@" ;;
    shape) cmd_shape ;;
    status) cmd_status ;;
    *) die "unknown verb '$verb'" ;;
    esac
}

main "$@"
