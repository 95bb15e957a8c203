/* A server's part in the fleet (sql/005_fleet.sql): it keeps its row in mqproc_workers
 * fresh, obeys the operators' standing wish for it (pause, drain; `mqproc pause|resume|
 * drain`) and stops the jobs they cancel (`mqproc jobs cancel`). The wish and the cancels
 * are read with every refresh (FLEET_INTERVAL_MS) and at once when the store relays an
 * operator's notice, so a command takes effect within a round trip. */
#ifndef MQPROC_FLEET_H
#define MQPROC_FLEET_H

#include "server/server.h"

#define MQPROC__FLEET_INTERVAL_MS 2000

/* Starts refreshing (the first refresh at once). version: what the row shows. */
int mqproc__fleet_start(mqproc__server_t *srv, const char *version);
/* Whether the operators paused this server (it takes no new job; a drain stops it). */
int mqproc__fleet_holds_back(const mqproc__server_t *srv);
/* The server stops: record it as stopped, then end the loop (at once when the store is
 * not reachable, else when the write ended or after a second). */
void mqproc__fleet_finish(mqproc__server_t *srv);
/* The server's state changed by itself (its first broker connection: starting -> running):
 * the row shows it now, not with the next beat. */
void mqproc__fleet_changed(mqproc__server_t *srv);
/* From the server's tick: refreshes the row when FLEET_INTERVAL_MS has passed. */
void mqproc__fleet_tick(mqproc__server_t *srv);
void mqproc__fleet_free(mqproc__server_t *srv);
/* Whether the store has taken a refresh of the workers row yet (the database is up). */
int mqproc__fleet_store_seen(const mqproc__server_t *srv);

#endif
