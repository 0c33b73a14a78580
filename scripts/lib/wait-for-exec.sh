# Sourced by scripts/s3-server and scripts/webdav-server, which define is_ours PID (true when PID runs with
# the script's config file).
#
# wait_for_exec PID: right after `cmd &`, PID is a copy of the calling script until setsid/nohup/the daemon
# have been exec'd, so its command line does not name the config yet; on a loaded machine that window is
# long enough for a liveness check to call the daemon dead (CI saw "nginx exited during start" while nginx
# was starting). Waits, up to 10 s, until PID runs the config or has exited.
wait_for_exec() {
    local pid=$1 state i
    for ((i = 0; i < 1000; i++)); do
        is_ours "$pid" && return 0
        state=$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null) || return 0
        [ -n "$state" ] && [ "$state" != Z ] || return 0
        sleep 0.01
    done
}
