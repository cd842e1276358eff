#!/usr/bin/env bash
# Starts a throwaway single-node Ceph cluster for tests: one monitor, one OSD and radosgw, with no
# systemd, no mgr and no cephx. Usage: ceph-cluster.sh start DIR MON_PORT RGW_PORT [memstore|bluestore|bluestore-lz4]
#                                       ceph-cluster.sh stop DIR
# Everything (config, data, logs, pid files) lives under DIR. Stop order matters: radosgw, then the
# OSD, then the monitor, or the daemons wait on each other's timeouts. A daemon still running after
# a quarter of a second is killed: the cluster is thrown away with DIR, so a clean shutdown buys nothing.
set -euo pipefail
cmd=$1 dir=$2

# The daemons detach, so their parent is init, which may reap them late: a zombie counts as gone.
alive() { [ -e "/proc/$1/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }

stop_pid() { # pid file
  local f=$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  kill "$pid" 2>/dev/null || return 0
  for _ in 1 2 3 4 5; do alive "$pid" || return 0; sleep 0.05; done
  kill -9 "$pid" 2>/dev/null || true
  while alive "$pid"; do sleep 0.02; done
}

if [ "$cmd" = stop ]; then
  stop_pid "$dir/run/client.pid"
  stop_pid "$dir/run/osd.pid"
  stop_pid "$dir/run/mon.pid"
  exit 0
fi

mon_port=$3 rgw_port=$4 backend=${5:-memstore} tls=${6:-}
mkdir -p "$dir"/{run,log,mon,osd,rgw}
conf=$dir/ceph.conf
frontend="beast endpoint=127.0.0.1:$rgw_port tcp_nodelay=1"
# HTTPS with a certificate of its own (tls.crt, which clients are given to trust): over TLS Sluice sends
# parts as UNSIGNED-PAYLOAD, so what signing their payloads costs over plain HTTP can be compared.
if [ "$tls" = tls ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
    -keyout "$dir/tls.key" -out "$dir/tls.crt" 2>/dev/null
  frontend="beast ssl_endpoint=127.0.0.1:$rgw_port ssl_certificate=$dir/tls.crt ssl_private_key=$dir/tls.key tcp_nodelay=1"
fi
compression=
# Every blob compressed: a bench can store objects far larger than the disk if their bytes compress.
if [ "$backend" = bluestore-lz4 ]; then
  # Blobs of 512 KiB in 4 KiB allocation units: with the defaults (64 KiB units) a blob that compresses to
  # almost nothing still takes half its size.
  compression=$'bluestore_compression_mode = force\nbluestore_compression_algorithm = lz4\nbluestore_min_alloc_size = 4096\nbluestore_compression_min_blob_size = 524288\nbluestore_compression_max_blob_size = 524288'
fi
fsid=$(cat /proc/sys/kernel/random/uuid)
cat >"$conf" <<CONF
[global]
fsid = $fsid
mon_host = v2:127.0.0.1:$mon_port
ms_bind_msgr1 = false
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
# With auth none, radosgw cannot authenticate to the monitor in the default secure mode.
ms_mon_client_mode = crc
run_dir = $dir/run
admin_socket = $dir/run/\$name.asok
pid_file = $dir/run/\$type.pid
log_file = $dir/log/\$name.log
mon_cluster_log_file = $dir/log/cluster.log
keyring = $dir/keyring
mon_data = $dir/mon
osd_data = $dir/osd
osd_objectstore = ${backend%-lz4}
memstore_device_bytes = 8589934592
bluestore_block_path = $dir/block
bluestore_block_size = 21474836480
$compression
bluestore_block_create = true
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
osd_crush_chooseleaf_type = 0
# Set together (with the OSD's failsafe above them all), or the cluster reports them out of order.
mon_osd_nearfull_ratio = 0.95
mon_osd_backfillfull_ratio = 0.96
mon_osd_full_ratio = 0.97
osd_failsafe_full_ratio = 0.98
# Paxos defaults batch proposals for a second; a test cluster wants each change at once.
paxos_propose_interval = 0.05
paxos_min_wait = 0.01
osd_mon_shutdown_timeout = 0.5
mon_osd_down_out_interval = 0
osd_pool_default_pg_autoscale_mode = off
mon_max_pg_per_osd = 1000
[client.rgw]
rgw_data = $dir/rgw
rgw_frontends = $frontend
rgw_init_timeout = 20
rgw_thread_pool_size = 64
rgw_dns_name = 127.0.0.1
# Bytes of deleted objects and aborted uploads go at once, not after radosgw's two hours: the OSD
# keeps every byte in RAM, and one cluster serves a whole test pass.
rgw_gc_obj_min_wait = 0
rgw_gc_processor_period = 2
CONF
ceph-authtool --create-keyring "$dir/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
monmaptool --create --addv a "[v2:127.0.0.1:$mon_port]" --fsid "$fsid" "$dir/monmap" >/dev/null
ceph-mon -c "$conf" --mkfs -i a --monmap "$dir/monmap" --keyring "$dir/keyring"
ceph-mon -c "$conf" -i a
osd_uuid=$(cat /proc/sys/kernel/random/uuid)
id=$(ceph -c "$conf" osd new "$osd_uuid")
ceph-osd -c "$conf" -i "$id" --mkfs --osd-uuid "$osd_uuid" 2>>"$dir/log/mkfs.log"
ceph-osd -c "$conf" -i "$id"
radosgw -c "$conf" -n client.rgw
