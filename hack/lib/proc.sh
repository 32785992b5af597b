# shellcheck shell=bash
# shellcheck disable=SC2154 # proc_run_dir and proc_log_dir: set by the sourcing script
# Background processes of the hack scripts (hack/cluster.sh, hack/node.sh, hack/operator.sh).
# Each runs in a session of its own (setsid): a crashed caller does not take it down, and a stop
# signals exactly it. Its pid is kept in $proc_run_dir/<name>.pid and its output appended to
# $proc_log_dir/<name>.log; the sourcing script sets both directories and defines `die`.

proc_pid() { cat "$proc_run_dir/$1.pid" 2>/dev/null || true; }

proc_running() { local pid; pid=$(proc_pid "$1"); [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; }

proc_start() { # <name> <command...>
  local name=$1
  shift
  mkdir -p "$proc_run_dir" "$proc_log_dir"
  setsid "$@" >>"$proc_log_dir/$name.log" 2>&1 </dev/null &
  echo $! >"$proc_run_dir/$name.pid"
}

# SIGTERM to every one first, so that their shutdowns overlap; then up to 10 s each before
# SIGKILL. Forgets their pids.
proc_stop() { # <name>...
  local name pid
  for name in "$@"; do
    pid=$(proc_pid "$name")
    if [[ -n $pid ]]; then kill -TERM "$pid" 2>/dev/null || true; fi
  done
  for name in "$@"; do
    pid=$(proc_pid "$name")
    [[ -n $pid ]] || continue
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$proc_run_dir/$name.pid"
  done
}

# Polls <command> until it succeeds; dies after <seconds>, or at once when <what> names a
# process started here that has exited (its log's last lines say why).
proc_wait_for() { # <what> <seconds> <command...>
  local what=$1 timeout=$2
  local deadline=$((SECONDS + timeout))
  shift 2
  until "$@" >/dev/null 2>&1; do
    if [[ -f $proc_run_dir/$what.pid ]] && ! proc_running "$what"; then
      tail -n 5 "$proc_log_dir/$what.log" >&2 || true
      die "$what exited; see $proc_log_dir/$what.log"
    fi
    ((SECONDS < deadline)) || die "$what not ready after ${timeout}s; see $proc_log_dir/"
    sleep 0.5
  done
}
