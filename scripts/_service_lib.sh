#!/usr/bin/env bash
# Shared by the service scripts: cache and data folders, pid files, waiting, stopping.
CDCFLOW_CACHE="${CDCFLOW_CACHE:-$HOME/.cache/cdcflow}"
CDCFLOW_DATA="${CDCFLOW_DATA:-$CDCFLOW_CACHE/run}"

die() { echo "$*" >&2; exit 1; }

is_running() {
  local pidfile="$1"
  [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

wait_until() {
  local name="$1" seconds="$2"; shift 2
  local deadline=$((SECONDS + seconds))
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 1
  done
}

stop_pid() {
  local name="$1" pidfile="$2" seconds="$3"
  if ! is_running "$pidfile"; then rm -f "$pidfile"; echo "$name: not running"; return 0; fi
  local pid; pid="$(cat "$pidfile")"
  kill -TERM "$pid"
  local deadline=$((SECONDS + seconds))
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then kill -KILL "$pid" 2>/dev/null || true; break; fi
    sleep 0.5
  done
  rm -f "$pidfile"
  echo "$name: stopped"
}
