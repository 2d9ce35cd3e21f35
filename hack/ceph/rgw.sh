#!/usr/bin/env bash
# Throwaway single-node Ceph cluster (1 mon, 1 memstore OSD, 1 radosgw) living
# entirely under one directory, for tests. Nothing under /etc/ceph or
# /var/lib/ceph is used or changed, so several clusters can run side by side.
#
#   rgw.sh start DIR PORT   create a new cluster under DIR, RGW on 127.0.0.1:PORT
#                           (mon on 127.0.0.1:PORT+1, OSD ports in PORT+2..PORT+9);
#                           writes DIR/admin.env (mode 0600) with the S3 keys of
#                           the RGW admin user "cosi-admin".
#   rgw.sh check DIR [PORT] signed S3 bucket/object round trip + Admin Ops API
#                           check (PORT defaults to the one saved in DIR/port)
#   rgw.sh probe DIR [PORT] checks of the user/bucket-policy behaviour in README.md
#   rgw.sh stop DIR         TERM (then KILL) the daemons via DIR/run/*.pid
#
# Run hack/ceph/install.sh first to install the Debian packages.
set -euo pipefail

ADMIN_UID=cosi-admin
TIMEOUT=${RGW_START_TIMEOUT:-90}

die() {
	echo "rgw.sh: $*" >&2
	exit 1
}

usage() {
	sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

abspath() { # create DIR if needed, print its canonical path
	mkdir -p "$1"
	(cd "$1" && pwd -P)
}

existing_dir() { # print canonical path of an existing cluster DIR
	[ -d "$1" ] || die "$1: no such directory"
	(cd "$1" && pwd -P)
}

port_of() { # DIR [PORT]
	if [ -n "${2:-}" ]; then
		echo "$2"
	elif [ -s "$1/port" ]; then
		cat "$1/port"
	else
		die "$1/port not found; give PORT"
	fi
}

# ---------------------------------------------------------------- helpers ---

pidof_daemon() { # DIR NAME -> pid or empty
	local f="$1/run/$2.pid"
	if [ -s "$f" ]; then cat "$f" || true; fi
}

# True if the pid file names a live (not zombie) process that was started with
# this cluster's ceph.conf, so a recycled pid is never signalled.
alive() { # DIR NAME
	local pid stat
	pid=$(pidof_daemon "$1" "$2")
	[ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
	stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[ "${stat%% *}" != Z ] || return 1
	tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qxF "$1/ceph.conf"
}

fail_with_log() { # DIR NAME MESSAGE
	local dir=$1 name=$2 clog
	case $name in
	mon) clog=mon.a.log ;;
	osd) clog=osd.0.log ;;
	rgw) clog=client.rgw.a.log ;;
	*) clog=$name.log ;;
	esac
	{
		echo "rgw.sh: $3"
		for f in "$dir/log/$clog" "$dir/log/$name.stderr"; do
			if [ -s "$f" ]; then
				echo "---- tail of $f ----"
				tail -n 30 "$f"
			fi
		done
	} >&2
	stop_cluster "$dir" >/dev/null 2>&1 || true
	exit 1
}

# Start a daemon in the foreground (-f) in its own session, fully detached from
# our stdio (so callers that read our output, e.g. Go's exec, do not hang), and
# record its pid.
spawn() { # DIR NAME CMD...
	local dir=$1 name=$2
	shift 2
	setsid "$@" </dev/null >"$dir/log/$name.stderr" 2>&1 &
	echo $! >"$dir/run/$name.pid"
}

# wait_for DIR NAME DESCRIPTION CMD... : poll CMD until it succeeds, the daemon
# dies, or the deadline passes.
wait_for() {
	local dir=$1 name=$2 what=$3
	shift 3
	while :; do
		if "$@" >/dev/null 2>&1; then
			return 0
		fi
		alive "$dir" "$name" || fail_with_log "$dir" "$name" "$name exited while waiting for $what"
		[ "$SECONDS" -lt "$DEADLINE" ] || fail_with_log "$dir" "$name" "timed out after ${TIMEOUT}s waiting for $what"
		sleep 0.5
	done
}

cephc() { ceph -c "$CONF" --connect-timeout 5 "$@"; }

osd_up() { [ "$(cephc osd dump -f json 2>/dev/null | grep -o '"up":1' | wc -l)" -ge 1 ]; }

rgw_up() { curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:$PORT/"; }

elapsed() { # START_USEC -> seconds with one decimal
	local d=$((${EPOCHREALTIME/[.,]/} - $1))
	printf '%d.%d' $((d / 1000000)) $((d % 1000000 / 100000))
}

json_field() { # FIELD < json : first "FIELD": "value"
	sed -n "s/.*\"$1\": *\"\\([^\"]*\\)\".*/\\1/p" | head -n 1
}

# --------------------------------------------------------------- commands ---

start_cluster() {
	local dir=$1
	PORT=$2
	if ! [[ "$PORT" =~ ^[0-9]+$ ]] || [ "$PORT" -le 0 ] || [ "$((PORT + 9))" -ge 65536 ]; then
		die "bad PORT '$PORT'"
	fi
	for b in ceph-mon ceph-osd radosgw ceph radosgw-admin ceph-authtool monmaptool curl; do
		command -v "$b" >/dev/null || die "$b not found; run hack/ceph/install.sh first"
	done
	local monport=$((PORT + 1))
	for p in "$PORT" "$monport"; do
		if (: </dev/tcp/127.0.0.1/"$p") 2>/dev/null; then
			die "port $p on 127.0.0.1 is already in use"
		fi
	done

	dir=$(abspath "$dir")
	[ -e "$dir/ceph.conf" ] && die "$dir already holds a cluster; use a new DIR"
	mkdir -p "$dir"/{log,run,mon,osd,rgw,crash,tmp}
	# Whatever goes wrong from here on, do not leave daemons behind.
	STARTED=0 START_DIR=$dir
	trap '[ "$STARTED" = 1 ] || stop_cluster "$START_DIR" >/dev/null 2>&1 || true' EXIT
	trap 'exit 130' INT TERM
	local t0=${EPOCHREALTIME/[.,]/}
	DEADLINE=$((SECONDS + TIMEOUT))
	CONF=$dir/ceph.conf
	export CEPH_CONF=$CONF

	local fsid osd_uuid
	fsid=$(cat /proc/sys/kernel/random/uuid)
	osd_uuid=$(cat /proc/sys/kernel/random/uuid)

	# $name / $id / $cluster below are Ceph config metavariables, not shell ones.
	cat >"$CONF" <<EOF
[global]
fsid = $fsid
mon initial members = a
mon host = v2:127.0.0.1:$monport
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind msgr1 = false
ms bind msgr2 = true
ms bind port min = $((PORT + 2))
ms bind port max = $((PORT + 9))
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
auth allow insecure global id reclaim = false
keyring = $dir/keyring
run dir = $dir/run
admin socket = $dir/run/\$name.asok
log file = $dir/log/\$name.log
mon cluster log file = $dir/log/cluster.log
log to stderr = false
err to stderr = true
crash dir = $dir/crash
tmp dir = $dir/tmp
pid file =
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
mon data avail warn = 2
mon data avail crit = 1
# commit map changes (e.g. RGW creating its pools) quickly instead of ~1/s
paxos propose interval = 0.05
paxos min wait = 0.01
osd mon shutdown timeout = 2

[mon]
mon data = $dir/mon/\$id

[osd]
osd data = $dir/osd/\$id
osd journal = $dir/osd/\$id/journal
osd objectstore = memstore
memstore device bytes = 1073741824

[client]
# no admin sockets for the CLI tools (ceph, radosgw-admin)
admin socket =

[client.rgw.a]
admin socket = $dir/run/\$name.asok
rgw data = $dir/rgw
rgw frontends = beast endpoint=127.0.0.1:$PORT
rgw enable apis = s3, admin
rgw thread pool size = 64
EOF

	# One keyring with every identity; the mon imports it at mkfs.
	local kr=$dir/keyring
	{
		ceph-authtool --create-keyring "$kr" --gen-key -n mon. --cap mon 'allow *'
		ceph-authtool "$kr" --gen-key -n client.admin \
			--cap mon 'allow *' --cap osd 'allow *' --cap mds 'allow *' --cap mgr 'allow *'
		ceph-authtool "$kr" --gen-key -n osd.0 \
			--cap mon 'allow profile osd' --cap osd 'allow *' --cap mgr 'allow profile osd'
		ceph-authtool "$kr" --gen-key -n client.rgw.a \
			--cap mon 'allow rw' --cap osd 'allow rwx' --cap mgr 'allow rw'
		monmaptool --create --clobber --fsid "$fsid" --enable-all-features \
			--addv a "[v2:127.0.0.1:$monport]" "$dir/monmap"
		ceph-mon -c "$CONF" --mkfs -i a --monmap "$dir/monmap" --keyring "$kr"
	} >"$dir/log/bootstrap.log" 2>&1 || {
		cat "$dir/log/bootstrap.log" >&2
		die "cluster bootstrap (keyring/monmap/mon mkfs) failed"
	}
	chmod 600 "$kr"

	# mon
	spawn "$dir" mon ceph-mon -f -c "$CONF" -i a
	wait_for "$dir" mon "the monitor to answer" cephc mon stat

	# osd (memstore: data lives in RAM, capped by memstore device bytes)
	local id
	id=$(cephc osd new "$osd_uuid" 2>>"$dir/log/bootstrap.log") || fail_with_log "$dir" mon "ceph osd new failed"
	[ "$id" = 0 ] || fail_with_log "$dir" mon "unexpected osd id '$id'"
	mkdir -p "$dir/osd/0"
	ceph-osd -c "$CONF" -i 0 --mkfs --osd-uuid "$osd_uuid" >>"$dir/log/bootstrap.log" 2>&1 ||
		fail_with_log "$dir" bootstrap "ceph-osd --mkfs failed"
	spawn "$dir" osd ceph-osd -f -c "$CONF" -i 0
	wait_for "$dir" osd "osd.0 to be up" osd_up

	# rgw (creates its pools on first start)
	spawn "$dir" rgw radosgw -f -c "$CONF" -n client.rgw.a
	wait_for "$dir" rgw "radosgw to answer on 127.0.0.1:$PORT" rgw_up

	# admin user for the tests
	local out ak sk
	out=$(radosgw-admin -c "$CONF" -n client.admin user create --uid "$ADMIN_UID" \
		--display-name "COSI admin" --caps "users=*;buckets=*;metadata=*;usage=*" 2>>"$dir/log/bootstrap.log") ||
		fail_with_log "$dir" bootstrap "radosgw-admin user create failed"
	ak=$(json_field access_key <<<"$out")
	sk=$(json_field secret_key <<<"$out")
	if [ -z "$ak" ] || [ -z "$sk" ]; then
		fail_with_log "$dir" bootstrap "could not read keys of $ADMIN_UID"
	fi
	(
		umask 077
		printf 'AWS_ACCESS_KEY_ID=%s\nAWS_SECRET_ACCESS_KEY=%s\n' "$ak" "$sk" >"$dir/admin.env"
	)
	chmod 600 "$dir/admin.env"
	echo "$PORT" >"$dir/port"
	STARTED=1

	echo "rgw.sh: RGW ready on http://127.0.0.1:$PORT (mon 127.0.0.1:$monport, dir $dir) in $(elapsed "$t0")s; keys in $dir/admin.env"
}

# TERM the named daemons, wait up to ~5 s, then KILL what is left.
stop_daemons() { # DIR NAME...
	local dir=$1 name any=0
	shift
	for name in "$@"; do
		if alive "$dir" "$name"; then
			kill -TERM "$(pidof_daemon "$dir" "$name")" 2>/dev/null || true
			any=1
		fi
	done
	[ "$any" = 1 ] || return 0
	for _ in $(seq 1 50); do
		any=0
		for name in "$@"; do
			alive "$dir" "$name" && any=1
		done
		[ "$any" = 0 ] && return 0
		sleep 0.1
	done
	for name in "$@"; do
		if alive "$dir" "$name"; then
			echo "rgw.sh: $name did not exit on TERM, sending KILL" >&2
			kill -KILL "$(pidof_daemon "$dir" "$name")" 2>/dev/null || true
		fi
	done
	for _ in $(seq 1 20); do
		any=0
		for name in "$@"; do
			alive "$dir" "$name" && any=1
		done
		[ "$any" = 0 ] && return 0
		sleep 0.1
	done
}

stop_cluster() {
	local dir=$1
	[ -d "$dir/run" ] || return 0
	# One at a time: radosgw needs the OSD to shut down cleanly, and the OSD
	# tells the mon it is going down (and waits for the reply).
	stop_daemons "$dir" rgw
	stop_daemons "$dir" osd
	stop_daemons "$dir" mon
}

# ------------------------------------------------------------ S3 helpers ---

load_env() {
	local dir=$1
	[ -r "$dir/admin.env" ] || die "$dir/admin.env not found; run '$0 start' first"
	# shellcheck disable=SC1091
	. "$dir/admin.env"
	ADMIN_AUTH="$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY"
	ENDPOINT=http://127.0.0.1:$PORT
}

# s3 AK:SK METHOD PATH[?QUERY] [curl args...]
# SigV4-signed request with curl. curl 7.88 does not sort or re-encode the
# query string when signing, so QUERY must already be sorted by key and
# percent-encoded (uppercase hex), and valueless keys written as "key=".
# Prints the body, then a last line "HTTP <code>".
s3() {
	local auth=$1 method=$2 path=$3
	shift 3
	curl -sS --max-time 20 -X "$method" --aws-sigv4 "aws:amz:us-east-1:s3" --user "$auth" \
		-H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
		-w '\nHTTP %{http_code}\n' "$@" "$ENDPOINT$path"
}

code_of() { tail -n 1 | sed 's/^HTTP //'; }

expect() { # WHAT WANT_CODE OUTPUT
	local got
	got=$(code_of <<<"$3")
	if [ "$got" = "$2" ]; then
		echo "ok   $1 -> $got"
	else
		echo "FAIL $1 -> $got (want $2)"
		sed '$d' <<<"$3" | head -c 2000
		echo
		FAILED=1
	fi
}

check_cluster() {
	local dir=$1
	PORT=$2
	load_env "$dir"
	FAILED=0
	local b="check-$RANDOM$RANDOM" out
	out=$(curl -sS --max-time 5 -w '\nHTTP %{http_code}\n' "$ENDPOINT/")
	expect "anonymous GET /" 200 "$out"
	out=$(s3 "$ADMIN_AUTH" PUT "/$b")
	expect "CreateBucket $b" 200 "$out"
	out=$(s3 "$ADMIN_AUTH" PUT "/$b/hello.txt" --data-binary "hello from rgw.sh")
	expect "PutObject $b/hello.txt" 200 "$out"
	out=$(s3 "$ADMIN_AUTH" GET "/$b/hello.txt")
	expect "GetObject $b/hello.txt" 200 "$out"
	if [ "$(sed '$d' <<<"$out")" = "hello from rgw.sh" ]; then
		echo "ok   object content matches"
	else
		echo "FAIL object content: $(sed '$d' <<<"$out" | head -c 200)"
		FAILED=1
	fi
	out=$(s3 "$ADMIN_AUTH" GET "/")
	expect "ListBuckets (signed)" 200 "$out"
	out=$(s3 "$ADMIN_AUTH" GET "/admin/user?format=json&uid=$ADMIN_UID")
	expect "Admin Ops GET /admin/user?uid=$ADMIN_UID" 200 "$out"
	if grep -q "\"user_id\":\"$ADMIN_UID\"" <<<"$out"; then
		echo "ok   admin API returned user JSON for $ADMIN_UID"
	else
		echo "FAIL admin API body: $(sed '$d' <<<"$out" | head -c 300)"
		FAILED=1
	fi
	out=$(s3 "$ADMIN_AUTH" DELETE "/$b/hello.txt")
	expect "DeleteObject" 204 "$out"
	out=$(s3 "$ADMIN_AUTH" DELETE "/$b")
	expect "DeleteBucket" 204 "$out"
	[ "$FAILED" = 0 ] || die "check failed"
	echo "rgw.sh: check passed"
}

# Access keys of a user JSON from the Admin Ops API.
user_auth() { # JSON -> AK:SK
	local ak sk
	ak=$(sed '$d' <<<"$1" | tr ',' '\n' | json_field access_key)
	sk=$(sed '$d' <<<"$1" | tr ',' '\n' | json_field secret_key)
	echo "$ak:$sk"
}

# Experiments behind the answers in README.md (users without bucket creation,
# bucket policies for other users).
probe_cluster() {
	local dir=$1
	PORT=$2
	load_env "$dir"
	FAILED=0
	local n=$RANDOM$RANDOM
	local u1="app-$n" u2="other-$n" b="shared-$n" out a1 a2 pol

	# (a) user that cannot create buckets: max-buckets=-1 on user create.
	out=$(s3 "$ADMIN_AUTH" PUT "/admin/user?display-name=app&format=json&generate-key=True&key-type=s3&max-buckets=-1&uid=$u1")
	expect "Admin Ops create user $u1 (max-buckets=-1)" 200 "$out"
	if grep -q '"max_buckets":-1' <<<"$out"; then
		echo "ok   max_buckets is -1"
	else
		echo "FAIL max_buckets not -1"
		FAILED=1
	fi
	a1=$(user_auth "$out")
	out=$(s3 "$ADMIN_AUTH" PUT "/admin/user?display-name=other&format=json&generate-key=True&max-buckets=-1&uid=$u2")
	expect "Admin Ops create user $u2 (max-buckets=-1)" 200 "$out"
	a2=$(user_auth "$out")

	out=$(s3 "$a1" PUT "/own-$n")
	expect "$u1 CreateBucket own-$n (denied)" 403 "$out"
	echo "     body: $(sed '$d' <<<"$out" | head -c 300)"

	# extra key for u1, then remove it again
	out=$(s3 "$ADMIN_AUTH" PUT "/admin/user?format=json&generate-key=True&key=&key-type=s3&uid=$u1")
	expect "Admin Ops create key for $u1" 200 "$out"
	local ak2
	ak2=$(sed '$d' <<<"$out" | tr '{' '\n' | grep -v "\"access_key\":\"${a1%%:*}\"" | tr ',' '\n' | json_field access_key)
	out=$(s3 "$ADMIN_AUTH" DELETE "/admin/user?access-key=$ak2&format=json&key=&key-type=s3&uid=$u1")
	expect "Admin Ops remove key $ak2 of $u1" 200 "$out"

	# (b) bucket owned by cosi-admin, access for u1 via bucket policy.
	out=$(s3 "$ADMIN_AUTH" PUT "/$b")
	expect "admin CreateBucket $b" 200 "$out"
	out=$(s3 "$a1" PUT "/$b/x" --data-binary x)
	expect "$u1 PutObject without policy (denied)" 403 "$out"
	out=$(s3 "$a1" GET "/$b/x")
	expect "$u1 GetObject without policy (denied)" 403 "$out"

	pol=$(
		cat <<EOF
{"Version":"2012-10-17","Statement":[
 {"Sid":"rw","Effect":"Allow","Principal":{"AWS":["arn:aws:iam:::user/$u1"]},
  "Action":["s3:GetObject","s3:PutObject","s3:DeleteObject"],"Resource":["arn:aws:s3:::$b/*"]},
 {"Sid":"list","Effect":"Allow","Principal":{"AWS":["arn:aws:iam:::user/$u1"]},
  "Action":["s3:ListBucket","s3:GetBucketLocation"],"Resource":["arn:aws:s3:::$b"]},
 {"Sid":"ro","Effect":"Allow","Principal":{"AWS":["arn:aws:iam:::user/$u2"]},
  "Action":["s3:GetObject"],"Resource":["arn:aws:s3:::$b/*"]}]}
EOF
	)
	out=$(s3 "$ADMIN_AUTH" PUT "/$b?policy=" --data-binary "$pol")
	expect "admin PutBucketPolicy $b" 204 "$out"
	out=$(s3 "$ADMIN_AUTH" GET "/$b?policy=")
	expect "admin GetBucketPolicy $b" 200 "$out"

	out=$(s3 "$a1" PUT "/$b/x" --data-binary "from $u1")
	expect "$u1 PutObject with policy" 200 "$out"
	out=$(s3 "$a1" GET "/$b/x")
	expect "$u1 GetObject with policy" 200 "$out"
	out=$(s3 "$a1" GET "/$b?list-type=2")
	expect "$u1 ListObjectsV2 with policy" 200 "$out"
	out=$(s3 "$a2" GET "/$b/x")
	expect "$u2 GetObject (GetObject-only policy)" 200 "$out"
	out=$(s3 "$a2" PUT "/$b/y" --data-binary y)
	expect "$u2 PutObject (GetObject-only policy, denied)" 403 "$out"
	out=$(s3 "$a2" GET "/$b?list-type=2")
	expect "$u2 ListObjectsV2 (no ListBucket grant, denied)" 403 "$out"
	out=$(s3 "$ADMIN_AUTH" GET "/$b/x")
	expect "admin (bucket owner) GetObject of object written by $u1 (denied: $u1 owns it)" 403 "$out"
	out=$(s3 "$ADMIN_AUTH" GET "/$b?list-type=2")
	expect "admin ListObjectsV2 still lists it" 200 "$out"
	out=$(s3 "$a1" PUT "/$b/z" --data-binary z -H "x-amz-acl: bucket-owner-full-control")
	expect "$u1 PutObject with x-amz-acl: bucket-owner-full-control" 200 "$out"
	out=$(s3 "$ADMIN_AUTH" GET "/$b/z")
	expect "admin GetObject of that object" 200 "$out"
	out=$(s3 "$a1" GET "/")
	echo "info $u1 ListBuckets -> $(code_of <<<"$out"), buckets listed: $(sed '$d' <<<"$out" | grep -o '<Name>[^<]*</Name>' | tr '\n' ' ')"
	out=$(s3 "$a1" PUT "/$b?policy=" --data-binary "$pol")
	expect "$u1 PutBucketPolicy on admin's bucket (denied)" 403 "$out"
	out=$(s3 "$a1" DELETE "/$b")
	expect "$u1 DeleteBucket on admin's bucket (denied)" 403 "$out"

	# Replace the policy with one naming only a user that does not exist:
	# accepted. u1 loses access to objects it does not own, keeps access to
	# the ones it wrote (object ACL), so revoke = delete the user / its keys.
	pol='{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":["arn:aws:iam:::user/nosuchuser-'$n'"]},"Action":["s3:GetObject"],"Resource":["arn:aws:s3:::'$b'/*"]}]}'
	out=$(s3 "$ADMIN_AUTH" PUT "/$b?policy=" --data-binary "$pol")
	expect "admin PutBucketPolicy naming a non-existent user" 204 "$out"
	out=$(s3 "$a1" PUT "/$b/x2" --data-binary x)
	expect "$u1 PutObject after policy replaced (denied)" 403 "$out"
	out=$(s3 "$a1" GET "/$b/x")
	expect "$u1 GetObject of its own object after policy replaced (still allowed)" 200 "$out"
	out=$(s3 "$ADMIN_AUTH" DELETE "/$b?policy=")
	expect "admin DeleteBucketPolicy" 200 "$out"
	out=$(s3 "$ADMIN_AUTH" PUT "/$b?policy=" --data-binary '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":["arn:aws:iam:::user/'$u1'"]},"Action":["s3:NoSuchAction"],"Resource":["arn:aws:s3:::'$b'/*"]}]}')
	expect "admin PutBucketPolicy with an unknown action (rejected)" 400 "$out"

	# max-buckets=0 means "default/unlimited", not "none"
	out=$(s3 "$ADMIN_AUTH" PUT "/admin/user?display-name=zero&format=json&generate-key=True&max-buckets=0&uid=zero-$n")
	expect "Admin Ops create user zero-$n (max-buckets=0)" 200 "$out"
	out=$(s3 "$(user_auth "$out")" PUT "/zero-$n")
	expect "zero-$n CreateBucket (allowed: 0 = no limit)" 200 "$out"
	out=$(s3 "$ADMIN_AUTH" DELETE "/admin/user?format=json&purge-data=True&uid=zero-$n")
	expect "Admin Ops remove user zero-$n purge-data (also removes its bucket)" 200 "$out"
	out=$(s3 "$ADMIN_AUTH" GET "/admin/bucket?bucket=zero-$n&format=json")
	expect "its bucket is gone" 404 "$out"

	# error shapes the Go client has to handle
	out=$(s3 "$ADMIN_AUTH" PUT "/admin/user?display-name=app&format=json&max-buckets=-1&uid=$u1")
	expect "Admin Ops create existing user (UserAlreadyExists)" 409 "$out"
	out=$(s3 "$ADMIN_AUTH" DELETE "/admin/user?access-key=NOSUCHKEY$n&format=json&key=&key-type=s3&uid=$u1")
	expect "Admin Ops remove unknown key (InvalidAccessKeyId)" 403 "$out"
	out=$(s3 "$ADMIN_AUTH" PUT "/admin/user?format=json&generate-key=True&key=&key-type=s3&uid=nosuchuser-$n")
	expect "Admin Ops create key for unknown user (NoSuchUser)" 404 "$out"
	out=$(s3 "$ADMIN_AUTH" DELETE "/admin/user?format=json&uid=nosuchuser-$n")
	expect "Admin Ops remove unknown user (NoSuchUser)" 404 "$out"
	out=$(s3 "$ADMIN_AUTH" DELETE "/$b")
	expect "S3 DeleteBucket of non-empty bucket (BucketNotEmpty)" 409 "$out"

	# bucket info / stats via Admin Ops
	out=$(s3 "$ADMIN_AUTH" GET "/admin/bucket?bucket=$b&format=json")
	expect "Admin Ops GET /admin/bucket?bucket=$b" 200 "$out"

	# cleanup: delete users (keys go with them), remove bucket with objects
	out=$(s3 "$ADMIN_AUTH" DELETE "/admin/bucket?bucket=$b&format=json&purge-objects=True")
	expect "Admin Ops remove bucket $b purge-objects" 200 "$out"
	out=$(s3 "$ADMIN_AUTH" DELETE "/admin/user?format=json&purge-data=True&uid=$u1")
	expect "Admin Ops remove user $u1 purge-data" 200 "$out"
	out=$(s3 "$ADMIN_AUTH" DELETE "/admin/user?format=json&uid=$u2")
	expect "Admin Ops remove user $u2" 200 "$out"
	out=$(s3 "$ADMIN_AUTH" GET "/admin/user?format=json&uid=$u2")
	expect "Admin Ops GET removed user $u2 (NoSuchUser)" 404 "$out"
	out=$(s3 "$ADMIN_AUTH" GET "/admin/bucket?bucket=$b&format=json")
	expect "Admin Ops GET removed bucket (NoSuchBucket)" 404 "$out"
	out=$(s3 "$a1" GET "/")
	expect "deleted user's key rejected" 403 "$out"
	[ "$FAILED" = 0 ] || die "probe failed"
	echo "rgw.sh: probe passed"
}

# ------------------------------------------------------------------ main ---

cmd=${1:-}
case "$cmd" in
start)
	[ $# -eq 3 ] || usage
	start_cluster "$2" "$3"
	;;
check | probe)
	[ $# -eq 2 ] || [ $# -eq 3 ] || usage
	d=$(existing_dir "$2")
	"${cmd}_cluster" "$d" "$(port_of "$d" "${3:-}")"
	;;
stop)
	[ $# -eq 2 ] || usage
	[ -d "$2" ] || exit 0
	stop_cluster "$(cd "$2" && pwd -P)"
	;;
*) usage ;;
esac
