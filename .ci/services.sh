#!/usr/bin/env bash
# Checks that PostgreSQL (127.0.0.1:5432) and Redis (127.0.0.1:6379) answer,
# starting them if they do not. Exits non-zero if either stays down.
set -uo pipefail

pg_up() { pg_isready -q -h 127.0.0.1 -p 5432; }
redis_up() { [ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null)" = "PONG" ]; }

if ! pg_up; then
    echo "postgres is not answering; starting it"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
    for _ in $(seq 1 30); do pg_up && break; sleep 1; done
fi
if ! redis_up; then
    echo "redis is not answering; starting it"
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no || true
    for _ in $(seq 1 30); do redis_up && break; sleep 1; done
fi

status=0
if pg_up; then echo "postgres: up"; else echo "ERROR: postgres at 127.0.0.1:5432 is down and could not be started"; status=1; fi
if redis_up; then echo "redis: up"; else echo "ERROR: redis at 127.0.0.1:6379 is down and could not be started"; status=1; fi
exit $status
