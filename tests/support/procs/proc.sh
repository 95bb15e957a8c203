#!/bin/sh
# Test processor for `mqproc processing-server --exec`. Its behaviour comes from the
# environment of the server that runs it (tests set these when they start the server; the
# harness passes PROC_* on with --pass-env):
#   PROC_MARKER=path      append "$MQPROC_JOB_ID $MQPROC_ATTEMPT $MQPROC_TRY" to path
#   PROC_COPY=dir         copy stdin to dir/$MQPROC_JOB_ID.json, environment to .env
#   PROC_SPANS=path       append "start|end <ns> $MQPROC_JOB_ID" around the work
#   PROC_SLEEP=seconds    work that long
#   PROC_GATE_MATCH=text  only jobs whose id contains text wait for PROC_GATE
#   PROC_GATE=path        then work until path exists (a test creates it when the job may
#                         end, e.g. once the broker is down)
#   PROC_BIG_FILE=path    write 3 MiB into path (an output file, not the log)
#   PROC_FAIL_MATCH=text  exit 3 when the job id contains text
#   PROC_SIGNAL=SIG       die by that signal when the job id contains "sig"
#   PROC_KILL_GROUP=1     send TERM, INT and QUIT to the own process group (ignored here),
#                         then succeed
set -u
if [ -n "${PROC_MARKER:-}" ]; then
  echo "$MQPROC_JOB_ID $MQPROC_ATTEMPT $MQPROC_TRY" >> "$PROC_MARKER"
fi
if [ -n "${PROC_COPY:-}" ]; then
  cat > "$PROC_COPY/$MQPROC_JOB_ID.json"
  env > "$PROC_COPY/$MQPROC_JOB_ID.env"
fi
if [ -n "${PROC_SPANS:-}" ]; then
  echo "start $(date +%s%N) $MQPROC_JOB_ID" >> "$PROC_SPANS"
fi
echo "proc.sh: job $MQPROC_JOB_ID attempt $MQPROC_ATTEMPT try $MQPROC_TRY"
if [ -n "${PROC_SLEEP:-}" ]; then
  sleep "$PROC_SLEEP"
fi
if [ -n "${PROC_GATE:-}" ] && case "$MQPROC_JOB_ID" in *"${PROC_GATE_MATCH:-}"*) true ;; *) false ;; esac; then
  while [ ! -e "$PROC_GATE" ]; do sleep 0.1; done
fi
if [ -n "${PROC_BIG_FILE:-}" ]; then
  head -c 3145728 /dev/zero > "$PROC_BIG_FILE" || exit 4
fi
if [ -n "${PROC_KILL_GROUP:-}" ]; then
  trap '' TERM INT QUIT
  kill -TERM 0
  kill -INT 0
  kill -QUIT 0
fi
if [ -n "${PROC_SPANS:-}" ]; then
  echo "end $(date +%s%N) $MQPROC_JOB_ID" >> "$PROC_SPANS"
fi
case "$MQPROC_JOB_ID" in
  *"${PROC_FAIL_MATCH:-@none@}"*) echo "proc.sh: failing on purpose" >&2; exit 3 ;;
esac
case "$MQPROC_JOB_ID" in
  *sig*) if [ -n "${PROC_SIGNAL:-}" ]; then kill "-$PROC_SIGNAL" $$; fi ;;
esac
exit 0
