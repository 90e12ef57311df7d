#!/bin/sh
# servers.sh DIR DATADIR HTTP ECHO SINK — the benchmark's server side, foreground, one process
# group: nginx on HTTP serving DATADIR/*.bin (hard-linked: identical bytes and mtime on every
# replica), the python echo server on ECHO, a socat sink to /dev/null on SINK. All deterministic.
set -e
dir=${1%/} data=$2 http=$3 echo=$4 sink=$5
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dir/www" "$dir/tmp"
for f in "$data"/*.bin; do ln -f "$f" "$dir/www/$(basename "$f")" 2>/dev/null || cp -p "$f" "$dir/www/"; done
cat >"$dir/nginx.conf" <<CONF
user root;
worker_processes 1;
daemon off;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 1024; }
http {
    default_type application/octet-stream;
    access_log off;
    sendfile on;
    server_tokens off;
    client_body_temp_path $dir/tmp;
    proxy_temp_path $dir/tmp;
    fastcgi_temp_path $dir/tmp;
    uwsgi_temp_path $dir/tmp;
    scgi_temp_path $dir/tmp;
    server { listen $http; root $dir/www; }
}
CONF
nginx -p "$dir/" -e "$dir/error.log" -c "$dir/nginx.conf" &
python3 "$here/netbench.py" echo-server --port "$echo" &
socat -u TCP-LISTEN:"$sink",fork,reuseaddr,backlog=128 OPEN:/dev/null &
wait
