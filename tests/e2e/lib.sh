# shellcheck shell=bash
# Helpers shared by the e2e scripts (sourced, bash).

# stop_pids PID...: SIGTERM to each, then up to 5 s per process before SIGKILL; reaps them.
stop_pids() {
  local p
  for p in "$@"; do kill -TERM "$p" 2>/dev/null; done
  for p in "$@"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
}

# delete_netns NAME...: stops whatever still runs inside each namespace, then deletes it. A
# background call of a wrapper function around `ip netns exec` leaves $! naming the subshell,
# not the daemon, so the daemon would otherwise outlive the test.
delete_netns() {
  local ns pids
  for ns in "$@"; do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    if [ -n "$pids" ]; then
      # shellcheck disable=SC2086  # one PID per word
      kill -TERM $pids 2>/dev/null
      for _ in $(seq 50); do
        pids=$(ip netns pids "$ns" 2>/dev/null)
        [ -n "$pids" ] || break
        sleep 0.1
      done
      # shellcheck disable=SC2086
      [ -z "$pids" ] || kill -KILL $pids 2>/dev/null
    fi
    ip netns del "$ns" 2>/dev/null
  done
}
