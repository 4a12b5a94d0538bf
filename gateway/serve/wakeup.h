/*
 * wakeup.h: the scale-from-zero wake-up webhook.
 *
 * When requests for a model with no replica ready start to be held
 * (admission.c), the gateway tells whoever scales the fleet: an HTTP POST of
 * {"model": NAME, "held": N} to scale_from_zero.webhook. Workers only ask
 * (lg_wakeup_call(): a copy into a list under a lock, an event activated);
 * the call itself runs on the control thread's event base (main.c's, where
 * reloads and discovery run), never on a worker's loop. Each call has its
 * own connection and timeout; a failure (no answer, a status outside 2xx)
 * is logged and counted, never retried here: admission.c asks again once
 * the hold it was made for has passed without a replica.
 */
#ifndef LG_WAKEUP_H
#define LG_WAKEUP_H

#include "base/lg_core.h"

struct event_base;
struct lg_wakeup;

/* Calls are made on `base` (the control thread's; the base must be thread-safe). */
struct lg_wakeup *lg_wakeup_new(struct event_base *base);
/* On the base's thread, before the base is freed; calls in flight are dropped. NULL is fine. */
void lg_wakeup_free(struct lg_wakeup *w);

/* Asks for a POST to `url` about `model` with `held` requests waiting; any thread. */
void lg_wakeup_call(struct lg_wakeup *w, const char *url, uint64_t timeout_ms, const char *model,
                    uint32_t held);

/* Calls that failed (no answer in time, refused, a status outside 2xx); any thread. */
uint64_t lg_wakeup_failures(const struct lg_wakeup *w);

#endif /* LG_WAKEUP_H */
