#!/bin/sh
# web.sh DIR — one replica of the campaign's web lab: nginx on 8080 (/big.bin, PUT /upload/) and a
# socat echo service on 7000, both in the foreground of this shell's process group. /big.bin is
# the campaign's file next to this script.
set -e
dir=${1%/}
here=$(dirname "$0")
mkdir -p "$dir/www/upload" "$dir/tmp/body"
ln -f "$here/big.bin" "$dir/www/big.bin" 2>/dev/null || cp -p "$here/big.bin" "$dir/www/big.bin"
cat >"$dir/nginx.conf" <<CONF
user root;
worker_processes 1;
daemon off;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 512; }
http {
    default_type application/octet-stream;
    access_log off;
    sendfile on;
    server_tokens off;
    client_body_temp_path $dir/tmp/body;
    server {
        listen 8080;
        root $dir/www;
        client_max_body_size 64m;
        location /upload/ { dav_methods PUT; create_full_put_path on; client_body_temp_path $dir/tmp/body; }
    }
}
CONF
socat -t 60 TCP-LISTEN:7000,fork,reuseaddr EXEC:cat &
exec nginx -p "$dir/" -e "$dir/error.log" -c "$dir/nginx.conf"
