/*
 * keys.h: API keys (auth.keys_file).
 *
 * Clients send `Authorization: Bearer KEY`. The keys file stores only the
 * SHA-256 of each key, with a name, the models it may use, a maximum of
 * requests at once, a request rate (token bucket, GCRA form) and a token
 * budget (tokens per minute and per day, counted in budget.c). The key set
 * is loaded at start and re-read on SIGHUP (from a new path, if the
 * configuration names one); a key that keeps its name keeps its counters
 * and its budget's account across a reload, so limits hold through it.
 *
 * A request holds its key (struct lg_key_hold) from the head to its end:
 * the key's name goes to the access log (never the key), and the hold gives
 * back its concurrency slot when released.
 */
#ifndef LG_KEYS_H
#define LG_KEYS_H

#include "base/lg_core.h"

struct lg_budget;
struct lg_budget_limits;
struct lg_config_errors;
struct lg_key;
struct lg_keys;

#define LG_KEY_NAME_MAX 64

/* What a request keeps of its key; zeroed = no key. */
struct lg_key_hold {
    struct lg_key *key; /* one reference; NULL: none (auth off, or refused) */
    bool counted;       /* holds one of the key's max_concurrency slots */
};

/*
 * Loads and validates a keys file. On success stores the key set in *out.
 * On failure returns LG_EINVAL (or LG_EIO) with every error appended to errs
 * as FILE:LINE:COL: error: /json/pointer: what is wrong.
 */
int lg_keys_load(const char *path, struct lg_keys **out, struct lg_config_errors *errs);

/* Same from memory (tests, fuzzing); `name` stands for the file name. */
int lg_keys_load_buffer(const char *text, size_t len, const char *name, struct lg_keys **out,
                        struct lg_config_errors *errs);

/*
 * A reload in two steps, so that a reload refused for another reason leaves
 * the keys in force as they were. lg_keys_stage() reads `path` (the file in
 * force when NULL; a new path is fine) into a key set that takes over the
 * counters of the keys in force of the same names; on error (logged with
 * positions) it returns LG_EINVAL or LG_EIO and nothing is staged.
 * lg_keys_commit() puts the staged set, and its path, in force (requests
 * then see it at once); lg_keys_unstage() drops it. One thread at a time
 * calls these three (the reloading one); requests go on from any thread.
 */
int lg_keys_stage(struct lg_keys *k, const char *path);
void lg_keys_commit(struct lg_keys *k);
void lg_keys_unstage(struct lg_keys *k);

/* Stages the file in force again and commits it (tests, tools). */
int lg_keys_reload(struct lg_keys *k);

/* Frees the set; holds still alive keep their keys. NULL is fine. */
void lg_keys_free(struct lg_keys *k);

/* Number of keys in force. */
size_t lg_keys_count(struct lg_keys *k);

/*
 * Finds the key an Authorization header value presents ("Bearer KEY"; value
 * and len from the request head, need not be terminated). Returns true and
 * fills hold (a reference) when the key is known; false otherwise. Any thread.
 */
bool lg_keys_authenticate(struct lg_keys *k, const char *value, size_t len,
                          struct lg_key_hold *hold);

/* The same for a header that holds the key alone (Anthropic's `x-api-key: KEY`). */
bool lg_keys_authenticate_raw(struct lg_keys *k, const char *value, size_t len,
                              struct lg_key_hold *hold);

/* May the held key use `model`? */
bool lg_keys_model_allowed(const struct lg_key_hold *hold, const char *model);

/*
 * Counts one request against the held key's limits: LG_OK, or LG_EBUSY when
 * over max_concurrency or the rate, with *retry_after_ms set (at least 1000
 * for concurrency; the bucket's refill time for the rate).
 */
int lg_keys_admit(struct lg_key_hold *hold, uint64_t now_ns, uint32_t *retry_after_ms);

/* Gives back the concurrency slot and the reference; idempotent. */
void lg_keys_release(struct lg_key_hold *hold);

/*
 * The held key's token budget: its account (borrowed for as long as the
 * hold), with the key's limits in *lim; NULL when the key has no budget.
 */
struct lg_budget *lg_keys_budget(const struct lg_key_hold *hold,
                                 const struct lg_budget_limits **lim);

/* A key's request rate as OpenAI's x-ratelimit-*-requests headers give it. */
struct lg_keys_rate_view {
    uint32_t limit;     /* requests allowed back to back (the burst) */
    uint32_t remaining; /* of those, allowed now */
    uint64_t reset_ms;  /* until the bucket is full again */
};

/* Fills *out and returns true when the held key has a request rate. */
bool lg_keys_rate_view(const struct lg_key_hold *hold, uint64_t now_ns,
                       struct lg_keys_rate_view *out);

typedef void (*lg_keys_budget_fn)(const char *name, const struct lg_budget_limits *lim,
                                  struct lg_budget *account, void *arg);

/*
 * Calls fn for each key in force that has a budget (under the table's read
 * lock: fn must not reload the keys; the account is borrowed for the call).
 */
void lg_keys_foreach_budget(struct lg_keys *k, lg_keys_budget_fn fn, void *arg);

struct lg_key_sched;
/* The held key's scheduling fields (tenant.h) in *out; false when no key is held. */
bool lg_keys_sched(const struct lg_key_hold *hold, struct lg_key_sched *out);

/* The held key's name (for the log), or NULL. */
const char *lg_keys_name(const struct lg_key_hold *hold);

/* Writes the lowercase hex SHA-256 of data (65 bytes with the NUL). */
void lg_keys_hash_hex(const void *data, size_t len, char out[65]);

#endif /* LG_KEYS_H */
