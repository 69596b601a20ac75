#!/bin/bash
# Single-node Ceph (mon + 1 OSD + radosgw) on loopback for the remote tests (tests/integration/test_remote.py);
# adapted from the reference in shared/reference/ceph-rgw. No systemd, no containers.
# Usage: start.sh DIR   (a writable folder; DIR is wiped first, so reruns are safe).
# Env: OBJECTSTORE=memstore|bluestore (default memstore), RGW_PORT (7480),
#      MON_PORT (v2 port, default 3300; v1 = MON_PORT+1), S3_ACCESS_KEY, S3_SECRET_KEY.
# Needs: apt-get install -y --no-install-recommends ceph-mon ceph-osd radosgw   (no ceph-mgr needed)
# Writes DIR/env (S3_ENDPOINT, S3_ACCESS_KEY, S3_SECRET_KEY, S3_REGION, CEPH_CONF); stop with stop.sh [DIR].
# Client notes for curl/libcurl 7.88 (Debian 12) with --aws-sigv4 / CURLOPT_AWS_SIGV4:
#  * send "x-amz-content-sha256: UNSIGNED-PAYLOAD" (or the body's sha256) yourself: 7.88 omits it -> 403
#  * put query parameters in sorted order and percent-encode values ('/' as %2F): 7.88 does not
#    canonicalise the query -> SignatureDoesNotMatch
#  * don't add "Expect:" (empty) to the header list: 7.88 signs an "expect" header it never sends -> 403
#  * PUT needs a Content-Length (CURLOPT_INFILESIZE_LARGE); chunked upload -> 411
set -euo pipefail
[ -n "${TRACE:-}" ] && { PS4='+ $(date +%s.%N) '; set -x; }
T0=$(date +%s.%N)
HERE=$(cd "$(dirname "$0")" && pwd)
D=${1:-$HERE/cluster}
OBJECTSTORE=${OBJECTSTORE:-memstore}
RGW_PORT=${RGW_PORT:-7480}
MON_PORT=${MON_PORT:-3300}
MON_PORT_V1=$((MON_PORT + 1))
S3_ACCESS_KEY=${S3_ACCESS_KEY:-TESTACCESSKEY0000000}
S3_SECRET_KEY=${S3_SECRET_KEY:-testsecretkey0000000000000000000000000000}

need() { command -v "$1" >/dev/null || { echo "missing $1 (apt-get install -y --no-install-recommends ceph-mon ceph-osd radosgw)" >&2; exit 1; }; }
for b in ceph-mon ceph-osd radosgw radosgw-admin ceph monmaptool ceph-authtool uuidgen curl; do need "$b"; done

trap 'echo "start.sh failed at line $LINENO; logs kept in $D/log" >&2; KEEP=1 "$HERE/stop.sh" "$D"' ERR
# stop anything a previous run left behind, then start from an empty folder
[ -x "$HERE/stop.sh" ] && "$HERE/stop.sh" "$D" >/dev/null 2>&1 || true
rm -rf "$D"
for port in "$MON_PORT" "$MON_PORT_V1" "$RGW_PORT"; do  # fail fast if another server holds a port
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then echo "port $port on 127.0.0.1 is in use" >&2; exit 1; fi
done
mkdir -p "$D"/{mon/a,osd/0,run,log,rgw}

FSID=$(uuidgen)
CONF=$D/ceph.conf
cat > "$CONF" <<EOF
[global]
fsid = $FSID
mon host = [v2:127.0.0.1:$MON_PORT,v1:127.0.0.1:$MON_PORT_V1]
public network = 127.0.0.0/8
ms bind ipv6 = false
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
run dir = $D/run
pid file = $D/run/\$name.pid
admin socket = $D/run/\$name.asok
log file = $D/log/\$name.log
log to stderr = false
err to stderr = true
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
# don't warn/stop when the disk is fuller than 70%/95% (the CI disk may be)
mon data avail warn = 1
mon data avail crit = 0
mon max pg per osd = 1000
# memory: keep caches small
osd memory target = 536870912
bluestore cache autotune = false
bluestore cache size = 134217728
[client]
keyring = $D/keyring
[mon]
keyring = $D/mon/\$id/keyring
mon data = $D/mon/\$id
mon cluster log file = $D/log/cluster.log
# commit map changes quickly: radosgw creates ~6 pools, each waiting for a new osdmap
paxos propose interval = 0.05
paxos min wait = 0.01
[osd]
osd data = $D/osd/\$id
keyring = $D/osd/\$id/keyring
osd objectstore = $OBJECTSTORE
memstore device bytes = 4294967296
bluestore block create = true
bluestore block size = 10737418240
bluestore fsck on mount = false
osd op num shards = 1
osd op num threads per shard = 2
# short PG logs: with memstore they live in RAM and otherwise grow by ~70 MiB per 2000 ops
osd min pg log entries = 100
osd max pg log entries = 500
osd pg log dups tracked = 500
osd pg log trim min = 50
[client.rgw.a]
keyring = $D/rgw/keyring
rgw frontends = beast endpoint=127.0.0.1:$RGW_PORT
rgw thread pool size = 32
rgw enable usage log = false
rgw dns name = localhost
EOF
C=(-c "$CONF")

# --- monitor
ceph-authtool --create-keyring "$D/mon.keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
ceph-authtool --create-keyring "$D/keyring" --gen-key -n client.admin \
  --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' --cap mds 'allow *' >/dev/null
ceph-authtool "$D/mon.keyring" --import-keyring "$D/keyring" >/dev/null
monmaptool --create --fsid "$FSID" --addv a "[v2:127.0.0.1:$MON_PORT,v1:127.0.0.1:$MON_PORT_V1]" "$D/monmap" >/dev/null
ceph-mon "${C[@]}" --mkfs -i a --monmap "$D/monmap" --keyring "$D/mon.keyring"
ceph-mon "${C[@]}" -i a          # daemonizes, writes run/mon.a.pid
timeout 60 ceph "${C[@]}" -s --connect-timeout 30 >/dev/null
ceph "${C[@]}" config set mon auth_allow_insecure_global_id_reclaim false >/dev/null 2>&1 || true

# --- one OSD
OSD_UUID=$(uuidgen)
OSD_ID=$(ceph "${C[@]}" osd new "$OSD_UUID")
ceph-osd "${C[@]}" -i "$OSD_ID" --mkfs --mkkey --osd-uuid "$OSD_UUID" --no-mon-config >"$D/log/osd-mkfs.log" 2>&1
ceph "${C[@]}" auth add "osd.$OSD_ID" osd 'allow *' mon 'allow profile osd' mgr 'allow profile osd' \
  -i "$D/osd/$OSD_ID/keyring" >/dev/null 2>&1
ceph-osd "${C[@]}" -i "$OSD_ID" 2>>"$D/log/osd-start.log"  # daemonizes
for i in $(seq 600); do
  ceph "${C[@]}" osd dump 2>/dev/null | grep -q "^osd.$OSD_ID up" && break
  sleep 0.1
done
ceph "${C[@]}" osd dump | grep -q "^osd.$OSD_ID up" || { echo "OSD did not come up" >&2; exit 1; }

# --- radosgw
ceph "${C[@]}" auth get-or-create client.rgw.a mon 'allow rw' osd 'allow rwx' mgr 'allow rw' \
  -o "$D/rgw/keyring" >/dev/null
radosgw "${C[@]}" -n client.rgw.a   # daemonizes
dead() { [ -f "$D/run/$1.pid" ] && ! kill -0 "$(cat "$D/run/$1.pid")" 2>/dev/null; }
for i in $(seq 1200); do
  curl -s -o /dev/null "http://127.0.0.1:$RGW_PORT/" && break
  dead client.rgw.a && { echo "radosgw exited; see $D/log/client.rgw.a.log" >&2; break; }
  sleep 0.1
done
curl -sf -o /dev/null "http://127.0.0.1:$RGW_PORT/" || { echo "radosgw did not answer" >&2; exit 1; }

# --- S3 user
radosgw-admin "${C[@]}" -n client.admin user create --uid=tester --display-name=tester \
  --access-key="$S3_ACCESS_KEY" --secret-key="$S3_SECRET_KEY" >"$D/rgw/user.json"

T1=$(date +%s.%N)
cat > "$D/env" <<EOF
export S3_ENDPOINT=http://127.0.0.1:$RGW_PORT
export S3_ACCESS_KEY=$S3_ACCESS_KEY
export S3_SECRET_KEY=$S3_SECRET_KEY
export S3_REGION=us-east-1
export CEPH_CONF=$CONF
EOF
printf 'ceph+radosgw up in %.1f s: S3 endpoint http://127.0.0.1:%s (env in %s/env)\n' \
  "$(echo "$T1 - $T0" | bc)" "$RGW_PORT" "$D"
