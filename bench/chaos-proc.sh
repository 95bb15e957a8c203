#!/bin/sh
# Processor of the chaos benchmark (bench/chaos.sh), run by `mqproc processing-server
# --exec` once per try. Side effects, one short line each, appended with O_APPEND (atomic
# for lines this short) to $CHAOS_SIDE_LOG:
#   "<job_id> <attempt> <try> <worker> start"    when it starts
#   "<job_id> <attempt> <try> <worker> done"     when it finishes (just before exit 0)
#   "<job_id> <attempt> <try> <worker> overlap"  at start, for each earlier run of the same
#                                                job that is still alive (shell or its sleep;
#                                                a zombie is dead: an init that reaps late,
#                                                as some containers' do, leaves killed runs as
#                                                zombies for a while, and kill -0 finds them)
# It works for the number of milliseconds that ends the job id ("job-00042-173": 173 ms),
# in a child process (like a wrapper script running the real processor), so the run time
# of every job is fixed by chaos.sh's --seed.
set -u
log=${CHAOS_SIDE_LOG:?CHAOS_SIDE_LOG is not set}
me="$MQPROC_JOB_ID $MQPROC_ATTEMPT $MQPROC_TRY ${CHAOS_WORKER:-?}"
pids=${CHAOS_RUN_DIR:?CHAOS_RUN_DIR is not set}/$MQPROC_JOB_ID
echo "$me start" >>"$log"
if [ -f "$pids" ]; then
  while read -r p; do
    st=
    # shellcheck disable=SC2034 # (pid and comm are read past)
    read -r _pid _comm st _rest <"/proc/$p/stat" 2>/dev/null || st=
    if [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]; then echo "$me overlap" >>"$log"; fi
  done <"$pids"
fi
ms=${MQPROC_JOB_ID##*-}
sleep "$((ms / 1000)).$(printf '%03d' $((ms % 1000)))" &
printf '%s\n%s\n' $$ $! >>"$pids"
wait $!
echo "$me done" >>"$log"
exit 0
