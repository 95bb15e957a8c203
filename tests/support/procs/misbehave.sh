#!/bin/sh
# Test processor for the runner's limits (tests/integration/test_processors.c). What it
# does depends on the job id's prefix; any other job succeeds at once.
#   hang-*    start `sleep $PROC_SLEEP` (default 1000) as a child, write the child's pid
#             to $PROC_PIDFILE (when set) and wait for it
#   pdeath-*  start `sleep 1000` as a child, write the child's pid to $PROC_PIDFILE and
#             wait (the child is the processor's own: only a group kill reaches it)
#   flood-*   write 2 GiB of zeros to stdout
#   orphan-*  leave `sleep 300` running in the background, write its pid to
#             $PROC_PIDFILE and exit 0
# Pid files are written to a temporary name and renamed, so a reader that sees the
# file sees all of it.
set -u
put_pid() {
  if [ -n "${PROC_PIDFILE:-}" ]; then
    echo "$1" > "$PROC_PIDFILE.tmp" && mv "$PROC_PIDFILE.tmp" "$PROC_PIDFILE"
  fi
}
echo "misbehave.sh: job $MQPROC_JOB_ID try $MQPROC_TRY"
case "$MQPROC_JOB_ID" in
  hang-*)
    sleep "${PROC_SLEEP:-1000}" &
    put_pid $!
    wait
    ;;
  pdeath-*)
    sleep 1000 &
    put_pid $!
    wait
    ;;
  flood-*)
    exec head -c 2G /dev/zero
    ;;
  orphan-*)
    sleep 300 &
    put_pid $!
    exit 0
    ;;
esac
exit 0
