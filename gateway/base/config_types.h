/*
 * config_types.h: the validated, immutable gateway configuration: the
 * structs every module reads (types only; config.h loads them).
 */
#ifndef LG_CONFIG_TYPES_H
#define LG_CONFIG_TYPES_H

#include <sys/socket.h>

#include <jansson.h>

#include "base/lg_core.h"

/* Engine vocabulary for /metrics scraping (health.c). */
enum lg_engine_flavor {
    LG_ENGINE_AUTO = 0, /* detect from the first scrape */
    LG_ENGINE_VLLM,
    LG_ENGINE_SGLANG,
    LG_ENGINE_TGI,
    LG_ENGINE_LLAMACPP,
    LG_ENGINE_NONE, /* do not scrape */
};

/* The per-response load report a backend is asked for (fleet/loadreport.h). */
enum lg_load_header {
    LG_LOAD_HEADER_OFF = 0, /* not asked */
    LG_LOAD_HEADER_TEXT,    /* endpoint-load-metrics-format: TEXT */
    LG_LOAD_HEADER_JSON,    /* endpoint-load-metrics-format: JSON */
};

struct lg_listen_conf {
    char *address;                /* as written: "127.0.0.1:8080", "[::]:443" */
    struct sockaddr_storage addr; /* resolved at load time */
    socklen_t addrlen;
    char *tls_cert; /* PEM file; NULL: plain TCP */
    char *tls_key;  /* PEM file */
};

/*
 * A backend entry with "discover" instead of "url" is a template: its name is
 * resolved on an interval (A and AAAA records) and expands into one backend
 * per address, named NAME@ADDR:PORT (discovery.c).
 */
struct lg_discover_conf {
    char *dns;              /* name to resolve; NULL: not a template */
    uint32_t port;          /* port of every discovered backend */
    uint64_t interval_ms;   /* re-resolution period */
};

/* How a backend hears of a request's priority class (serve/relay.c). */
enum lg_priority_field {
    LG_PRIORITY_FIELD_OFF = 0,
    LG_PRIORITY_FIELD_VLLM, /* vLLM's "priority" (lower first): batch 1, default 0,
                               interactive -1, system -2 */
};

/* What a backend's engine does with the class it hears (routing's estimate). */
enum lg_engine_priority {
    LG_ENGINE_PRIORITY_NONE = 0, /* nothing known: every request there counts ahead */
    LG_ENGINE_PRIORITY_PREEMPT,  /* it serves by class and takes a lower class's slot for a
                                    higher one: only the requests of a class and above
                                    delay its first token */
};

struct lg_backend_conf {
    char *name;
    char *url;            /* as written; NULL in a template */
    bool tls;             /* https:// */
    char *host;           /* host part of the URL (no brackets) */
    uint16_t port;        /* explicit or 80/443 */
    char *host_header;    /* "host[:port]" sent as Host */
    char *path_prefix;    /* "" or "/base" (no trailing slash) prepended to paths */
    char **models;        /* NULL-terminated; served model names (aliases included) */
    size_t nmodels;
    uint32_t weight;        /* relative share, 1..1000; default 1 */
    uint32_t max_inflight;  /* requests at once from this gateway; 0 = unlimited */
    enum lg_engine_flavor flavor;
    char *metrics_path;     /* default "/metrics" */
    char *health_path;      /* default "/health" */
    enum lg_load_header load_header; /* ask each response for the engine's load; default off */
    uint32_t prefill_chunk; /* prompt tokens a step of the engine carries at most, its decodes
                               included (llama.cpp's --batch-size, vLLM's
                               max_num_batched_tokens); 0 = a prompt in one step */
    char *load_path;        /* polled for the engine's load (vLLM /load, SGLang /v1/loads)
                               every health.scrape_interval; NULL: not polled */
    char *api_key;          /* sent as Authorization: Bearer to this backend; NULL: none */
    char *tls_ca_file;      /* https: PEM CAs the backend's certificate must chain to;
                               NULL: the system's default CAs */
    char *tls_server_name;  /* https: SNI and the name verified; NULL: the URL's host */
    char *tls_cert;         /* https: client certificate chain (PEM); NULL: none */
    char *tls_key;          /* https: its private key (PEM) */
    bool tls_insecure;      /* https: insecure_skip_verify (no verification at all) */
    struct sockaddr_storage addr; /* first address of host, resolved at load time; addrlen 0
                                     if not resolved (LG_CONFIG_F_NO_RESOLVE) */
    socklen_t addrlen;
    bool enabled;           /* "enabled": false backends are validated, then left out of
                               backends[]: always true in a loaded config */
    struct lg_discover_conf discover; /* dns != NULL: a template (in templates[]) */
    int priority_field;     /* enum lg_priority_field: the request's class in its body */
    int engine_priority;    /* enum lg_engine_priority: what its engine does with it */
};

struct lg_timeouts_conf {
    uint64_t client_header_ms;    /* whole request head must arrive within */
    uint64_t client_body_ms;      /* idle time allowed between body reads */
    uint64_t client_body_grace_ms; /* whole body: within this plus a second per min_rate bytes */
    size_t client_body_min_rate;  /* bytes per second a body must average; 0 = no deadline */
    uint64_t client_idle_ms;      /* keep-alive idle between requests */
    uint64_t upstream_connect_ms; /* TCP (and TLS) connect to a backend */
    uint64_t first_byte_ms;       /* request sent -> first response byte */
    uint64_t stream_idle_ms;      /* max silence between response bytes */
    uint64_t total_ms;            /* whole request, arrival to last byte; 0 = none */
    uint64_t drain_ms;            /* on SIGTERM: how long in-flight requests may run */
    uint64_t upstream_idle_ms;    /* idle pooled upstream connection is closed after */
    uint64_t upstream_purge_ms;   /* half the idle connections above upstream_keepalive
                                     closed every this long; 0 = at once */
    uint64_t client_stall_ms;     /* a client that reads nothing for this long is cut */
    uint64_t queue_ms;            /* longest wait in the admission queue (admission.c) */
};

struct lg_limits_conf {
    size_t max_header_bytes;       /* request line + headers */
    uint32_t max_headers;          /* number of header fields */
    size_t max_body_bytes;         /* request body */
    uint32_t max_connections;      /* client connections, whole process */
    uint32_t max_connections_per_ip; /* 0 = unlimited */
    size_t stream_buffer_bytes;    /* bytes queued to a slow client before the
                                      upstream read is paused */
    uint32_t upstream_keepalive;   /* idle pooled connections per backend per worker */
    uint32_t queue_length;         /* requests waiting per model when every backend is at
                                      max_inflight; 0 = refuse at once */
};

struct lg_retry_conf {
    uint32_t attempts;     /* total tries per request, 1 = no retry */
    double budget_ratio;   /* retries allowed as a share of requests (0..1) */
    uint32_t budget_min;   /* retries always allowed per second, whatever the ratio */
    uint32_t on;           /* the failures retried: LG_FAIL_BIT()s of enum lg_fail (fail.h) */
};

/* What routing.resume allows for a model's streams. */
enum lg_resume_mode {
    LG_RESUME_OFF = 0, /* never continued */
    LG_RESUME_GREEDY,  /* continued when sampled at temperature 0 */
    LG_RESUME_SEEDED,  /* that, or when seeded */
};

/* One model's entry of routing.resume.models. */
struct lg_resume_rule {
    const char *model;        /* borrowed from root */
    enum lg_resume_mode mode;
};

/* Mid-stream failover (serve/resume.c). */
struct lg_resume_conf {
    json_t *models;        /* {model or "*": "off" | "greedy" | "seeded"}, borrowed from
                              root; NULL: off for every model */
    struct lg_resume_rule *rules; /* owned: models' entries but "*", as read at load */
    size_t nrules;
    enum lg_resume_mode others;   /* the mode of models without an entry ("*", else off) */
    uint32_t attempts;     /* continuations per stream */
    size_t max_text;       /* bytes of delivered text kept per stream */
};

/* Hedged first tokens (serve/hedge.c). */
struct lg_hedge_conf {
    bool enabled;        /* hedge eligible streamed requests */
    double factor;       /* deadline: factor x the TTFT predicted for the pick */
    uint64_t min_ms;     /* the deadline's floor */
    uint64_t max_ms;     /* its ceiling, and the deadline when nothing was predicted */
    double budget_ratio; /* duplicates allowed as a share of eligible requests (0..1) */
    uint32_t budget_min; /* duplicates always allowed per second, whatever the ratio */
    size_t hold_bytes;   /* bytes an attempt may hold before a winner is known */
};

/* The Responses API's follow-ups (serve/respmap.h): where each answer was made. */
struct lg_responses_conf {
    uint32_t table;       /* response ids remembered (entries) */
    uint64_t ttl_ms;      /* how long one is remembered */
};

/* One stage of a routing pipeline (router.c). */
struct lg_route_stage_conf {
    char *policy;             /* a built-in or loaded policy's name */
    double weight;            /* multiplies the stage's costs; default 1 */
    json_t *options;          /* borrowed from root; NULL: routing.options[policy] */
};

struct lg_routing_conf {
    char *policy;             /* name of a built-in or loaded policy (one-stage pipeline) */
    struct lg_route_stage_conf *pipeline; /* stages, in order; when set, `policy` is unset */
    size_t npipeline;
    char **plugins;           /* NULL-terminated paths of policy .so files to load */
    size_t nplugins;
    json_t *policy_options;   /* "options": {policy name: its options} (borrowed from root) */
    struct lg_retry_conf retry;
    struct lg_resume_conf resume;
    struct lg_hedge_conf hedge;
    char *session_header;     /* header whose value pins a client to a backend; NULL: off */
    char **session_headers;   /* NULL-terminated: more such headers, the first present
                                 wins (after session_header); NULL: none set */
    size_t nsession_headers;
    struct lg_responses_conf responses;
    size_t prefix_bytes;      /* prompt bytes hashed for prefix affinity */
};

struct lg_access_log_conf {
    char *path;            /* "-" = stdout (the default); NULL = off ("access_log": false) */
    uint64_t flush_ms;     /* flush interval */
    size_t buffer_bytes;   /* per-worker buffer; a full buffer flushes early */
};

struct lg_health_conf {
    uint64_t interval_ms;        /* active check period */
    uint64_t timeout_ms;
    uint32_t rise;               /* successes to mark up */
    uint32_t fall;               /* failures to mark down */
    uint64_t scrape_interval_ms; /* engine /metrics period; 0 = off */
    uint64_t load_interval_ms;   /* backends' load_path poll period */
    uint32_t eject_consecutive;  /* passive: consecutive failures that eject */
    uint64_t eject_base_ms;      /* first ejection length; doubles each time */
    uint64_t eject_max_ms;
    uint64_t slow_start_ms;      /* ramp length for a backend that joins or recovers */
    uint64_t peer_interval_ms;   /* least time between two answers of a peer */
};

/* The status page's history (ops/history.c): one point per resolution. */
struct lg_history_conf {
    uint64_t resolution_ms; /* time a point covers */
    uint64_t window_ms;     /* time kept: window / resolution points; 0 = no history */
};

struct lg_admin_conf {
    char *listen;                 /* NULL: no admin listener */
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char *token;                  /* bearer token; NULL: open (loopback default) */
    struct lg_history_conf history;
};

/* Most points a history keeps per series (window / resolution). */
#define LG_HISTORY_MAX_POINTS 2880

/* Another gateway in front of the same fleet (peers.h): its admin listener. */
struct lg_peer_conf {
    char *admin;                  /* "host:port" */
    struct sockaddr_storage addr;
    socklen_t addrlen;
};

struct lg_discovery_conf {
    char *nameserver;             /* "ip:port" of the DNS server; NULL: /etc/resolv.conf */
    struct sockaddr_storage addr;
    socklen_t addrlen;
    uint64_t timeout_ms;          /* one DNS query */
};

struct lg_auth_conf {
    char *keys_file;              /* API keys (keys.c); NULL: no authentication */
};

/* What a gateway does when its budget store stops answering (serve/budgetstore.c). */
enum lg_budget_failure {
    LG_BUDGET_FAIL_OPEN = 0, /* decide from this gateway's counts alone */
    LG_BUDGET_FAIL_CLOSED,   /* refuse requests of keys with budgets (503) */
};

/* The Redis server that gateways share token budgets through. */
struct lg_budget_redis_conf {
    char *address;                /* "host:port"; NULL: budgets are this gateway's alone */
    struct sockaddr_storage addr; /* resolved at load time */
    socklen_t addrlen;
    char *password;               /* AUTH; NULL: none */
    uint32_t db;                  /* SELECT */
    char *key_prefix;             /* the store's keys: PREFIX:ACCOUNT:m|d:WINDOW */
    uint64_t sync_interval_ms;    /* how often shares are written and sums read */
    uint64_t timeout_ms;          /* an answer later than this: the store is down */
    int on_failure;               /* enum lg_budget_failure */
};

/* Token budgets (the limits are per key, in the keys file: serve/keys.c). */
struct lg_budgets_conf {
    uint32_t prompt_bytes_per_token; /* a prompt's tokens are estimated as bytes / this */
    uint32_t default_max_tokens;     /* a request without max_tokens reserves this many */
    struct lg_budget_redis_conf redis;
};

/*
 * Priority classes (serve/sched.c), a fixed set, lowest first: the scheduler
 * serves a higher class before a lower one. Their names are "batch",
 * "default", "interactive" and "system" (lg_class_names).
 */
enum lg_prio_class {
    LG_CLASS_BATCH = 0,
    LG_CLASS_DEFAULT,
    LG_CLASS_INTERACTIVE,
    LG_CLASS_SYSTEM,
    LG_NCLASSES
};

/* What a request header asking for more than its key's max_class gets. */
enum lg_class_over {
    LG_CLASS_OVER_CLAMP = 0, /* the key's max_class (logged) */
    LG_CLASS_OVER_REFUSE,    /* 403 */
};

/* One priority class. */
struct lg_class_conf {
    uint64_t queue_deadline_ms; /* longest wait in the admission queue; 0: timeouts.queue */
    bool sheddable;             /* refused at once (429) when it would have to wait, or when
                                   the router predicts its TTFT target missed */
    uint64_t ttft_target_ms;    /* the first token's target; 0: none */
    double reserve;             /* sheddable: the share of a backend's max_inflight it
                                   leaves to higher classes (0: none) */
    bool yield_prefill;         /* not sent where the engine preempts for priority while a
                                   higher class's request there awaits its first token (its
                                   prompt would share that prefill's step): elsewhere, else
                                   refused (sheddable) or held in the admission queue */
    uint32_t prompts_per_step;  /* where the engine preempts for priority: at most this many
                                   of ours of this class and below sent there per engine
                                   step (the same ways as yield_prefill); 0: no bound */
};

/* Who shares the fleet, and how the admission queue orders them (serve/sched.c). */
struct lg_scheduling_conf {
    bool fair;                  /* classes, then fairness between tenants, then deadlines;
                                   false: first come, first served (classes still shed) */
    char *priority_header;      /* the request's class (up to its key's max_class) */
    char *ttft_header;          /* the request's TTFT target in ms */
    size_t priority_header_len; /* their lengths (0: none), for the relay, which drops both */
    size_t ttft_header_len;
    int over_max_class;         /* enum lg_class_over */
    struct lg_class_conf classes[LG_NCLASSES];
};

/* Every tenant named by a header: tokens per minute and per day (0: none). */
struct lg_tenant_budget_conf {
    uint32_t tokens_per_minute;
    uint32_t tokens_per_day;
};

/* Tenants: who a request counts for in fairness (serve/tenant.c). */
struct lg_tenants_conf {
    char **headers;             /* NULL-terminated: the first one present names the tenant;
                                   none present (or none configured): the key's name */
    size_t nheaders;
    uint32_t max;               /* tenants remembered at once; more share "other" */
    uint64_t idle_expiry_ms;    /* a tenant idle this long is forgotten */
    uint64_t half_life_ms;      /* attained service halves over this time */
    struct lg_tenant_budget_conf budget;
};

/* One model's entry of scale_from_zero.models: what it changes for that model. */
struct lg_sfz_model_conf {
    char *model;
    bool enabled;      /* hold this model's requests (default true for a listed model) */
    uint32_t max_held; /* 0: the section's */
    uint64_t hold_ms;  /* 0: the section's */
};

/*
 * Scale from zero (serve/admission.c, serve/wakeup.c): a request for a model
 * with no replica ready waits for one (bounded in count and time), and a
 * wake-up webhook is called once per model per cold period.
 */
struct lg_sfz_conf {
    bool enabled;                /* for models without an entry in `models` */
    uint32_t max_held;           /* held requests per model */
    uint64_t hold_ms;            /* longest hold */
    uint64_t retry_after_ms;     /* Retry-After of a 503 past the hold or with the hold full */
    char *webhook;               /* "http://host[:port][/path]"; NULL: no call */
    uint64_t webhook_timeout_ms; /* one call */
    struct lg_sfz_model_conf *models;
    size_t nmodels;
};

/* How spans are written to the collector (OTLP/HTTP's two encodings). */
enum lg_otlp_encoding {
    LG_OTLP_PROTOBUF = 0, /* application/x-protobuf, OTLP's default */
    LG_OTLP_JSON,         /* application/json, OTLP's JSON mapping */
};

/* Traces exported over OTLP/HTTP (base/otlp.c, serve/trace.c); read at start. */
struct lg_tracing_conf {
    char *endpoint;          /* the collector's URL, "http://host:port[/path]" (no path:
                                /v1/traces); NULL: tracing off */
    json_t *headers;         /* borrowed from the root: {"name": "value"} sent with each
                                export; NULL: none */
    double sample_ratio;     /* of the traces started here, the share sampled (an inbound
                                traceparent's sampled flag is followed instead) */
    char *service_name;      /* the resource's service.name */
    uint32_t queue;          /* spans waiting for export at most; past it they are dropped */
    uint32_t batch;          /* spans in one export at most */
    uint64_t interval_ms;    /* spans waiting leave at least this often */
    uint64_t timeout_ms;     /* one export: connect, send and the answer */
    enum lg_otlp_encoding encoding;
};

#define LG_CONFIG_MAX_WORKERS 256

struct lg_config {
    char *path;                   /* file it came from ("<string>" for tests) */
    char *text;                   /* owned: the document as read (NUL-terminated), where
                                     errors found after the load are located
                                     (lg_config_position(): a policy's options) */
    size_t text_len;
    json_t *root;                 /* the parsed document, kept for plugin sections */
    struct lg_listen_conf *listen;
    size_t nlisten;
    uint32_t workers;             /* event-loop threads; 0 = auto ("auto" or 0 in the file):
                                     the CPUs the process may use when it starts
                                     (base/cpus.h), at most LG_CONFIG_MAX_WORKERS */
    enum lg_log_level log_level;
    struct lg_timeouts_conf timeouts;
    struct lg_limits_conf limits;
    struct lg_routing_conf routing;
    struct lg_access_log_conf access_log;
    struct lg_health_conf health;
    struct lg_admin_conf admin;
    struct lg_peer_conf *peers;   /* gateways sharing the fleet (this one may be listed) */
    size_t npeers;
    struct lg_discovery_conf discovery;
    struct lg_auth_conf auth;
    struct lg_budgets_conf budgets;
    struct lg_scheduling_conf scheduling;
    struct lg_tenants_conf tenants;
    struct lg_sfz_conf scale_from_zero;
    struct lg_tracing_conf tracing;
    struct lg_backend_conf *backends;  /* backends with a URL, enabled */
    size_t nbackends;
    struct lg_backend_conf *templates; /* enabled entries with "discover", in file order */
    size_t ntemplates;
    char **warnings;              /* risky settings, each "FILE:LINE:COL: warning: /pointer:
                                     what and what to do" (admin open without a token, a
                                     backend listed twice, a timeout that is practically none) */
    size_t nwarnings;
    int refcnt;                   /* atomic; see lg_config_ref() */
};

/*
 * Collected errors, each already formatted as
 *   FILE:LINE:COL: error: /json/pointer: what is wrong
 * At most LG_CONFIG_MAX_ERRORS are kept; `dropped` counts the rest.
 */
#define LG_CONFIG_MAX_ERRORS 20
struct lg_config_errors {
    char *msgs[LG_CONFIG_MAX_ERRORS];
    size_t n;
    size_t dropped;
};

/* Flags for lg_config_load_buffer_flags(). */
#define LG_CONFIG_F_NO_RESOLVE (1u << 0) /* resolve numeric hosts only; names get addrlen 0 */
#define LG_CONFIG_F_EXPANDED   (1u << 1) /* a document discovery.c expanded: backend names
                                            may hold '@', '[' and ']' (up to 128 bytes) */

/* Largest config file accepted, in bytes. */
#define LG_CONFIG_MAX_BYTES (8u << 20)

#endif /* LG_CONFIG_TYPES_H */
