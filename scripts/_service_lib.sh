#!/usr/bin/env bash
# Shared by the service scripts: cache and data folders, pid files, waiting, stopping, and asking a
# service whether it serves requests.
# Nothing here runs the system's python3: on a fresh machine it has none of cdcflow's packages
# (they live in the project's virtual environment, project_python), and these scripts must tell the
# truth from a plain shell before scripts/setup.sh ever ran.
CDCFLOW_CACHE="${CDCFLOW_CACHE:-$HOME/.cache/cdcflow}"
CDCFLOW_DATA="${CDCFLOW_DATA:-$CDCFLOW_CACHE/run}"

die() { echo "$*" >&2; exit 1; }

# The interpreter of the project's virtual environment (scripts/setup.sh makes it): CDCFLOW_VENV,
# relative to the repository unless absolute, else .venv.
project_python() {
  local venv="${CDCFLOW_VENV:-.venv}"
  case "$venv" in
    /*) ;;
    *) venv="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/$venv" ;;
  esac
  echo "$venv/bin/python"
}

is_running() {
  local pidfile="$1"
  [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

# The first COUNT bytes, in hex, that the server on HOST:PORT sends back for REQUEST (printf
# escapes); nothing when it refuses the connection or says nothing within 3 s. bash's /dev/tcp and
# coreutils alone: enough of a service's wire protocol to see that it serves requests.
tcp_reply_hex() {
  local host="$1" port="$2" request="$3" count="$4"
  # shellcheck disable=SC2016  # $0..$3 belong to the inner shell
  timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1" && printf "$2" >&3 && od -An -tx1 -N"$3" <&3' \
    "$host" "$port" "$request" "$count" 2>/dev/null | tr -d ' \n' || true
}

# Whether HOST:PORT accepts a TCP connection within 3 s (for a listener that speaks only TLS).
tcp_accepts() {
  # shellcheck disable=SC2016
  timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$1" "$2" 2>/dev/null
}

wait_until() {
  local name="$1" seconds="$2"; shift 2
  local deadline=$((SECONDS + seconds))
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 1
  done
}

# Wait until CHECK... passes for the process whose pid PIDFILE holds: fails as soon as that process
# has exited (a port taken, a bad configuration) instead of waiting out SECONDS.
wait_started() {
  local name="$1" pidfile="$2" seconds="$3"; shift 3
  local deadline=$((SECONDS + seconds))
  until "$@"; do
    is_running "$pidfile" || { echo "$name: the process exited before it answered" >&2; return 1; }
    [ "$SECONDS" -lt "$deadline" ] || { echo "$name: no answer after $seconds s" >&2; return 1; }
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

# A start that did not come up stops what it launched (a half-started server would hold the ports
# and the data folder, and the next start would launch a second one beside it), then fails.
abandon_start() {
  local name="$1" pidfile="$2"; shift 2
  stop_pid "$name" "$pidfile" 30 >&2
  die "$*"
}

# The start of a service whose pid file names a live process: that process came from an earlier
# start (perhaps still coming up), so it is waited for, never doubled. One that never answers is
# left alone (it was not this start's to stop): the message says so.
await_existing() {
  local name="$1" pidfile="$2" seconds="$3"; shift 3
  wait_started "$name" "$pidfile" "$seconds" "$@" \
    || die "$name: pid $(cat "$pidfile" 2>/dev/null) (from $pidfile) runs but does not answer; see its log, or stop it first"
}

# Before a launch: nothing else may already answer where the service is to listen (another instance
# with other data, started elsewhere), or the new process would fail to bind while the check passed
# on the other one's answers.
refuse_if_answering() {
  local name="$1" where="$2"; shift 2
  if "$@"; then
    die "$name: $where already answers, but not as a process this script started (no live pid in its pid file): stop that one, or give this one other ports"
  fi
  return 0
}

# status: 0 when the process of PIDFILE runs and CHECK... passes. Something else answering at WHERE
# (another instance, a process whose pid file is gone) is not this service running: said on stderr.
service_status() {
  local name="$1" where="$2" pidfile="$3"; shift 3
  if is_running "$pidfile" && "$@"; then return 0; fi
  if "$@"; then echo "$name: $where answers, but not as the process of $pidfile" >&2; fi
  return 1
}
