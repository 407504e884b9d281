#!/usr/bin/env bash
# A throw-away PostgreSQL cluster for the test suites (docs/postgres.md):
#
#   pg-cluster.sh install            install Debian's postgresql-15 when no server is found
#   pg-cluster.sh start DIR [ADDRS]  initdb a cluster in DIR, start it listening on ADDRS
#                                    (comma-separated; default 127.0.0.1) at a free port, make
#                                    the databases `hookstate` and `hookstate_tls` (which takes
#                                    TLS connections only) and print the first's address; the
#                                    address is also in DIR/url, the server's pid in DIR/pid
#   pg-cluster.sh restart DIR        crash the server (SIGQUIT to its pid: an immediate shutdown,
#                                    which recovers from its log on start) and start it again
#   pg-cluster.sh stop DIR           stop the server by its pid (fast shutdown, then SIGKILL)
#
# The server also takes TLS, with a certificate for localhost and 127.0.0.1 signed by a
# self-signed CA made by openssl at start: DIR/ca.crt is what a client verifies it with.
# The cluster's only role is the test user `hookstate` with a password (SCRAM over TCP), so
# the suites log in as a real deployment does. When run as root, initdb and the server run as
# the `postgres` user, which owns DIR. Nothing outside DIR is written (besides the install).
set -euo pipefail

PG_MAJOR=15
# Longest wait for the server to start or stop, in seconds: a cold start on a loaded 2-core
# machine takes a few seconds; past this something is wrong.
WAIT_SECS=60
# The test role's password: a throw-away cluster on the loopback or test-only addresses.
PASSWORD="hookstate-test-pw"

die() { printf 'pg-cluster: %s\n' "$*" >&2; exit 1; }

bindir() {
    local dir
    for dir in "/usr/lib/postgresql/$PG_MAJOR/bin" /usr/lib/postgresql/*/bin; do
        if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then
            printf '%s\n' "$dir"
            return 0
        fi
    done
    command -v initdb >/dev/null 2>&1 && dirname "$(command -v initdb)" && return 0
    return 1
}

install() {
    if bindir >/dev/null; then
        return 0
    fi
    [ "$(id -u)" = 0 ] || die "no PostgreSQL server found and not root: install postgresql-$PG_MAJOR"
    command -v apt-get >/dev/null 2>&1 || die "no PostgreSQL server found and no apt-get"
    echo "pg-cluster: installing postgresql-$PG_MAJOR from the Debian archive" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends "postgresql-$PG_MAJOR" >&2
    bindir >/dev/null || die "postgresql-$PG_MAJOR installed but initdb not found"
}

# Runs a command as the cluster's owner: `postgres` when we are root, else ourselves.
as_owner() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

free_port() {
    local port tries=0
    while [ "$tries" -lt 200 ]; do
        port=$((20000 + RANDOM % 30000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            printf '%s\n' "$port"
            return 0
        fi
        tries=$((tries + 1))
    done
    die "no free port found"
}

server_start() {
    local dir="$1" bin
    bin="$(bindir)" || die "no PostgreSQL server found (run: pg-cluster.sh install)"
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t "$WAIT_SECS" \
        -o "-c listen_addresses='$(cat "$dir/addrs")' -p $(cat "$dir/port") -k '$dir'" \
        start >/dev/null || { tail -20 "$dir/server.log" >&2; die "the server did not start"; }
    head -1 "$dir/data/postmaster.pid" >"$dir/pid"
}

start() {
    local dir="$1" addrs="${2:-127.0.0.1}" bin port first
    bin="$(bindir)" || die "no PostgreSQL server found (run: pg-cluster.sh install)"
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    [ "$(id -u)" = 0 ] && chown postgres: "$dir"
    printf '%s\n' "$PASSWORD" >"$dir/pwfile"
    [ "$(id -u)" = 0 ] && chown postgres: "$dir/pwfile"
    as_owner "$bin/initdb" -D "$dir/data" -U hookstate --pwfile="$dir/pwfile" \
        --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --no-sync >/dev/null \
        || die "initdb failed"
    # A throw-away CA (DIR/ca.crt, what a client verifies the server with) and the server's
    # certificate for localhost and 127.0.0.1, signed by it.
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=hookstate test CA" \
        -keyout "$dir/ca.key" -out "$dir/ca.crt" >/dev/null 2>&1 \
        && openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
            -keyout "$dir/data/server.key" -out "$dir/server.csr" >/dev/null 2>&1 \
        && printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' \
            >"$dir/server.ext" \
        && openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
            -CAcreateserial -days 2 -extfile "$dir/server.ext" -out "$dir/data/server.crt" \
            >/dev/null 2>&1 \
        || die "openssl could not make the certificates"
    chmod 600 "$dir/data/server.key"
    [ "$(id -u)" = 0 ] && chown postgres: "$dir/data/server.key" "$dir/data/server.crt"
    printf 'ssl = on\n' >>"$dir/data/postgresql.conf"
    # The database `hookstate_tls` takes TLS connections only (the TLS test's proof that its
    # connection was encrypted); hosts of the test's own namespaces log in over TCP from their
    # own addresses.
    sed -i '1i hostnossl hookstate_tls all all reject' "$dir/data/pg_hba.conf"
    printf 'host all all 0.0.0.0/0 scram-sha-256\n' >>"$dir/data/pg_hba.conf"
    port="$(free_port)"
    printf '%s\n' "$port" >"$dir/port"
    printf '%s\n' "$addrs" >"$dir/addrs"
    server_start "$dir"
    as_owner "$bin/psql" -h "$dir" -p "$port" -U hookstate -d postgres -qAt \
        -c "CREATE DATABASE hookstate" -c "CREATE DATABASE hookstate_tls" >/dev/null \
        || die "cannot create the databases"
    first="${addrs%%,*}"
    printf 'postgres://hookstate:%s@%s:%s/hookstate\n' "$PASSWORD" "$first" "$port" >"$dir/url"
    cat "$dir/url"
}

stop() {
    local dir="$1" signal="${2:-INT}" pid waited=0
    [ -f "$dir/pid" ] || return 0
    pid="$(cat "$dir/pid")"
    if kill "-$signal" "$pid" 2>/dev/null; then
        while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt $((WAIT_SECS * 10)) ]; do
            sleep 0.1
            waited=$((waited + 1))
        done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$dir/pid"
}

case "${1:-}" in
    install) install ;;
    start) [ $# -ge 2 ] || die "usage: pg-cluster.sh start DIR [ADDRS]"; start "$2" "${3:-}" ;;
    restart) [ $# -ge 2 ] || die "usage: pg-cluster.sh restart DIR"; stop "$2" QUIT; server_start "$2" ;;
    stop) [ $# -ge 2 ] || die "usage: pg-cluster.sh stop DIR"; stop "$2" ;;
    *) die "usage: pg-cluster.sh install | start DIR [ADDRS] | restart DIR | stop DIR" ;;
esac
