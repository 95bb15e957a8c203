/* The broker's one factory (broker.h): the backend a URL's scheme names is chosen here and
 * nowhere else. */
#include "broker/broker.h"

#include "broker/dirq.h"

int mqproc__broker_new(mqproc__broker_t **out, const char *url, const mqproc__topology_t *topo,
                       const mqproc__broker_events_t *ev, char *err) {
  if (mqproc__dirq_is_url(url))
    return mqproc__broker_dir_new(out, url, topo, ev, err);
  return mqproc__broker_amqp_new(out, url, topo, ev, err);
}
