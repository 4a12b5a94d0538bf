/*
 * test_hedge.c: hedged first tokens, the pure parts: which requests may be
 * hedged, the deadline from the router's prediction, and the budget.
 */
#include <math.h>
#include <string.h>

#include "base/config.h"
#include "http/openai.h"
#include "lg_test.h"
#include "route/router.h"
#include "serve/hedge.h"
#include "serve/worker.h"

#define MS ((uint64_t)1000000)
#define S  ((uint64_t)1000000000)

static struct lg_hedge_conf
conf(void)
{
    struct lg_hedge_conf hc = {
        .enabled = true,
        .factor = 3,
        .min_ms = 250,
        .max_ms = 10000,
        .budget_ratio = 0.05,
        .budget_min = 1,
        .hold_bytes = 16384,
    };

    return hc;
}

static bool
eligible(const struct lg_hedge_conf *hc, const char *path, const char *body)
{
    struct lg_openai_req info;
    char err[128];

    if (lg_openai_inspect_mem(body, strlen(body), 0, &info, err, sizeof(err)) != LG_OK) {
        fprintf(stderr, "bad test body: %s\n", err);
        return false;
    }
    return lg_hedge_eligible(hc, path, strlen(path), &info);
}

static int
test_eligible(void)
{
    struct lg_hedge_conf hc = conf();
    static const char chat[] = "/v1/chat/completions";

    LG_CHECK(eligible(&hc, chat, "{\"model\":\"m\",\"stream\":true}"));
    LG_CHECK(
        eligible(&hc, "/v1/completions", "{\"model\":\"m\",\"stream\":true,\"prompt\":\"x\"}"));
    LG_CHECK(eligible(&hc, "/v1/chat/completions?x=1", "{\"stream\":true}")); /* query left out */
    LG_CHECK(eligible(&hc, chat, "{\"stream\":true,\"n\":1,\"best_of\":null,\"store\":false}"));
    LG_CHECK(eligible(&hc, chat, "{\"stream\":true,\"tools\":[{\"type\":\"function\"}]}"));
    /* not streamed: no first token to race to */
    LG_CHECK(!eligible(&hc, chat, "{\"model\":\"m\"}"));
    LG_CHECK(!eligible(&hc, chat, "{\"model\":\"m\",\"stream\":false}"));
    /* more than one choice, stored, other endpoints */
    LG_CHECK(!eligible(&hc, chat, "{\"stream\":true,\"n\":2}"));
    LG_CHECK(!eligible(&hc, chat, "{\"stream\":true,\"n\":0}"));
    LG_CHECK(!eligible(&hc, chat, "{\"stream\":true,\"n\":\"1\"}"));
    LG_CHECK(!eligible(&hc, "/v1/completions", "{\"stream\":true,\"best_of\":3}"));
    LG_CHECK(!eligible(&hc, chat, "{\"stream\":true,\"store\":true}"));
    /* one of those twice: an engine may read either, so the costlier is assumed */
    LG_CHECK(!eligible(&hc, chat, "{\"stream\":true,\"n\":1,\"n\":1}"));
    LG_CHECK(!eligible(&hc, chat, "{\"stream\":true,\"store\":false,\"store\":false}"));
    LG_CHECK(!eligible(&hc, "/v1/embeddings", "{\"stream\":true}"));
    LG_CHECK(!eligible(&hc, "/v1/responses", "{\"stream\":true}"));
    LG_CHECK(!eligible(&hc, "/v1/chat/completionsX", "{\"stream\":true}"));
    LG_CHECK(!eligible(&hc, "/v1/chat", "{\"stream\":true}"));
    hc.enabled = false;
    LG_CHECK(!eligible(&hc, chat, "{\"stream\":true}"));
    return 0;
}

static struct lg_route_result
pick(double model_pred_ms, double wait_ms, double ahead_ms, double service_ms)
{
    struct lg_route_result r;

    memset(&r, 0, sizeof(r));
    r.model_pred_ms = model_pred_ms;
    r.wait_ms = wait_ms;
    r.ahead_ms = ahead_ms;
    r.service_ms = service_ms;
    r.model_ms = -1;
    return r;
}

static int
test_deadline(void)
{
    struct lg_hedge_conf hc = conf();
    struct lg_route_result p;

    /* the engine model's prediction where it made one */
    p = pick(200, 1000, 1000, 1000);
    LG_CHECK(lg_hedge_deadline_ms(&hc, &p) == 600);
    /* else queueing, the work ahead and the service, added */
    p = pick(-1, 100, 50, 150);
    LG_CHECK(lg_hedge_deadline_ms(&hc, &p) == 900);
    /* floored, capped */
    p = pick(20, 0, 0, 0);
    LG_CHECK(lg_hedge_deadline_ms(&hc, &p) == 250);
    p = pick(-1, 60000, 0, 100);
    LG_CHECK(lg_hedge_deadline_ms(&hc, &p) == 10000);
    /* nothing predicted (or nonsense): the latest deadline */
    p = pick(-1, 0, 0, 0);
    LG_CHECK(lg_hedge_deadline_ms(&hc, &p) == 10000);
    p = pick(NAN, 0, 0, 0);
    LG_CHECK(lg_hedge_deadline_ms(&hc, &p) == 10000);
    p = pick(-1, INFINITY, 0, 0);
    LG_CHECK(lg_hedge_deadline_ms(&hc, &p) == 10000);
    /* the factor scales */
    hc.factor = 1.5;
    p = pick(1000, 0, 0, 0);
    LG_CHECK(lg_hedge_deadline_ms(&hc, &p) == 1500);
    return 0;
}

static int
test_budget(void)
{
    struct lg_hedge_conf hc = conf();
    struct lg_hedge_budget b = { 0 };
    uint64_t t = 1000 * S;
    int spent = 0;

    /* empty at first; a share of each eligible request */
    hc.budget_min = 0;
    hc.budget_ratio = 0.25;
    LG_CHECK(!lg_hedge_budget_update(&b, &hc, 1, t, 0, true));
    for (int i = 0; i < 3; i++) {
        LG_CHECK(!lg_hedge_budget_update(&b, &hc, 1, t, 1, false));
    }
    LG_CHECK(lg_hedge_budget_update(&b, &hc, 1, t, 1, false)); /* the 4th: one token */
    LG_CHECK(lg_hedge_budget_update(&b, &hc, 1, t, 0, true));
    LG_CHECK(!lg_hedge_budget_update(&b, &hc, 1, t, 0, true)); /* spent */
    /* over many requests: at most the ratio */
    for (int i = 0; i < 4000; i++) {
        t += 10 * MS;
        lg_hedge_budget_update(&b, &hc, 1, t, 1, false);
        spent += lg_hedge_budget_update(&b, &hc, 1, t, 0, true);
    }
    LG_CHECK(spent >= 990 && spent <= 1000);
    /* budget_min a second whatever the ratio, spread over the workers */
    hc.budget_ratio = 0;
    hc.budget_min = 4;
    memset(&b, 0, sizeof(b));
    spent = 0;
    t = 5000 * S;
    lg_hedge_budget_update(&b, &hc, 2, t, 0, false);
    for (int i = 0; i < 1000; i++) {
        t += 10 * MS;
        spent += lg_hedge_budget_update(&b, &hc, 2, t, 1, true);
    }
    LG_CHECK(spent >= 19 && spent <= 20); /* 10 s at 4 a second over 2 workers */
    /* unspent budget beyond 10 + budget_min fades: after a quiet minute that is left */
    memset(&b, 0, sizeof(b));
    hc.budget_min = 1;
    t = 9000 * S;
    lg_hedge_budget_update(&b, &hc, 1, t, 0, false);
    lg_hedge_budget_update(&b, &hc, 1, t + 600 * S, 0, false);
    LG_CHECK(fabs(b.tokens - 11) < 0.01);
    /* and a busy fleet saves more for a burst: 10 s at 100 requests a second, 5% */
    memset(&b, 0, sizeof(b));
    hc.budget_min = 0;
    hc.budget_ratio = 0.05;
    t = 20000 * S;
    for (int i = 0; i < 1000; i++) {
        t += 10 * MS;
        lg_hedge_budget_update(&b, &hc, 1, t, 1, false);
    }
    LG_CHECK(b.tokens > 30 && b.tokens < 50);
    spent = 0;
    while (lg_hedge_budget_update(&b, &hc, 1, t, 0, true)) {
        spent++;
    }
    LG_CHECK(spent > 30);
    /* a clock that goes back changes nothing */
    b.tokens = 2;
    LG_CHECK(lg_hedge_budget_update(&b, &hc, 1, t - S, 0, false) && b.tokens == 2);
    return 0;
}

LG_TEST_MAIN(test_eligible, test_deadline, test_budget)
