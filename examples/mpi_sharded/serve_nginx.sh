#!/usr/bin/env bash
# A real nginx serving a directory at http://127.0.0.1:<free port>/, for mpi_sharded's remote mode
# and its ctest cases (the fixture starts it, a cleanup test stops it even when a run failed).
#   serve_nginx.sh start STATE_DIR ROOT   nginx (as a daemon) with its config, pid, logs and temp
#                                         files in STATE_DIR; writes the base URL to STATE_DIR/url
#   serve_nginx.sh run STATE_DIR CMD...   runs CMD with each @URL@ in its arguments replaced by that URL
#   serve_nginx.sh stop STATE_DIR         stops the nginx whose pid is in STATE_DIR/nginx.pid
# SLUICE_NGINX names the binary (default: nginx on PATH, then /usr/sbin/nginx). (Not NGINX: nginx
# itself reads that variable, for sockets inherited across a binary upgrade.)
set -euo pipefail
cmd=${1:?usage: serve_nginx.sh start|run|stop STATE_DIR ...}
state=${2:?usage: serve_nginx.sh start|run|stop STATE_DIR ...}
shift 2

answers() {  # whether something listens on 127.0.0.1:$1
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

case "$cmd" in
start)
  root=$(cd "${1:?start needs the directory to serve}" && pwd)
  exe=${SLUICE_NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
  [ -x "$exe" ] || { echo "serve_nginx.sh: nginx not found (Debian: apt-get install nginx)" >&2; exit 1; }
  mkdir -p "$state/logs" "$state/tmp"
  state=$(cd "$state" && pwd)
  # A port from a random draw; nginx binds it before it daemonizes, so a taken port fails here and
  # the next draw is tried.
  for attempt in $(seq 1 20); do
    port=$(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 ))
    answers "$port" && continue
    {
      [ "$(id -u)" -eq 0 ] && echo "user root root;"   # the worker must read root's directories
      echo "worker_processes 2; pid $state/nginx.pid; error_log $state/logs/error.log;"
      echo "events { worker_connections 256; }"
      echo "http { access_log $state/logs/access.log; default_type application/octet-stream;"
      for t in client_body proxy fastcgi uwsgi scgi; do echo "  ${t}_temp_path $state/tmp/$t;"; done
      echo "  server { listen 127.0.0.1:$port; root $root; } }"
    } >"$state/nginx.conf"
    # Its standard streams go to a file: a daemon holding the caller's pipes would keep ctest waiting.
    if env -u NGINX "$exe" -p "$state" -c "$state/nginx.conf" -e "$state/logs/error.log" \
         </dev/null >>"$state/logs/start.log" 2>&1; then
      for i in $(seq 1 200); do answers "$port" && break; sleep 0.05; done
      answers "$port" || { echo "serve_nginx.sh: nginx started but does not answer on $port" >&2; exit 1; }
      echo "http://127.0.0.1:$port" >"$state/url"
      echo "nginx (pid $(cat "$state/nginx.pid")) serves $root at http://127.0.0.1:$port/"
      exit 0
    fi
  done
  echo "serve_nginx.sh: nginx did not start:" >&2
  tail -5 "$state/logs/start.log" "$state/logs/error.log" >&2 2>/dev/null || true
  exit 1
  ;;
run)
  [ -f "$state/url" ] || { echo "serve_nginx.sh: no server in $state (start it first)" >&2; exit 1; }
  url=$(cat "$state/url")
  args=()
  for a in "$@"; do args+=("${a//@URL@/$url}"); done
  exec "${args[@]}"
  ;;
stop)
  [ -f "$state/nginx.pid" ] || { echo "serve_nginx.sh: no nginx running from $state"; exit 0; }
  pid=$(cat "$state/nginx.pid")
  kill -TERM "$pid" 2>/dev/null || { rm -f "$state/nginx.pid" "$state/url"; exit 0; }
  for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  rm -f "$state/url" "$state/nginx.pid"
  echo "nginx (pid $pid) stopped"
  ;;
*)
  echo "serve_nginx.sh: unknown command $cmd (start, run, stop)" >&2
  exit 2
  ;;
esac
