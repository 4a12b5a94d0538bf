/*
 * fuzz_tenant.c: a request's tenant, class and TTFT target from its headers
 * (gateway/serve/tenant.c) on arbitrary bytes. The input's first byte picks
 * the key's class, max_class and whether there is a key; the rest is
 * "name: value" lines, the request's head fields. It must never crash or
 * leak; a refusal is 400 or 403 naming a header; an accepted request has a
 * valid class no higher than the key's max_class (or the header's clamp),
 * a tenant whose name is a valid one, and a deadline exactly when it has a
 * target. The parsers alone see every line too.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/config.h"
#include "http/httphdr.h"
#include "serve/tenant.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char conf_text[] =
    "{\"listen\": \"127.0.0.1:0\", \"backends\": [{\"name\": \"a\", \"url\": "
    "\"http://127.0.0.1:1\", \"models\": [\"m\"]}], \"tenants\": {\"headers\": [\"x-tenant\", "
    "\"x-team\"], \"max\": 4}, \"scheduling\": {\"interactive\": {\"ttft_target\": \"500ms\"}}}";

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct lg_config *conf[2];
    struct lg_config_errors errs = { 0 };
    struct lg_tenants_conf tc = { .max = 4, .idle_expiry_ms = 1000, .half_life_ms = 1000 };
    struct lg_tenants *t;
    struct lg_hdrs hs;
    struct lg_key_sched ks;
    struct lg_req_sched rs;
    struct lg_tenant_refusal no;
    const char *p = (const char *)data, *end = p + size;
    int rc;

    if (conf[0] == NULL) {
        if (lg_config_load_buffer(conf_text, strlen(conf_text), "c.json", &conf[0], &errs)
            != LG_OK) {
            abort();
        }
        conf[1] = conf[0];
    }
    if (size == 0) {
        return 0;
    }
    ks.cls = (uint8_t)(data[0] % LG_NCLASSES);
    ks.max_class = (uint8_t)LG_MAX(ks.cls, (data[0] >> 2) % LG_NCLASSES);
    ks.ttft_target_ms = (data[0] & 0x10) ? 250 : 0;
    ((struct lg_config *)conf[0])->scheduling.over_max_class =
        (data[0] & 0x20) ? LG_CLASS_OVER_REFUSE : LG_CLASS_OVER_CLAMP;
    p++;
    lg_hdrs_init(&hs, 16384, 64);
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *line_end = nl != NULL ? nl : end;
        const char *colon = memchr(p, ':', (size_t)(line_end - p));

        /* the parsers on the raw line */
        (void)lg_class_parse(p, (size_t)(line_end - p));
        if (lg_tenant_parse_ms(p, (size_t)(line_end - p)) > 3600000) {
            abort();
        }
        (void)lg_tenant_name_ok(p, (size_t)(line_end - p));
        if (colon != NULL && colon > p) {
            const char *v = colon + 1;

            while (v < line_end && *v == ' ') {
                v++;
            }
            if (lg_hdrs_on_field(&hs, p, (size_t)(colon - p)) != 0
                || lg_hdrs_on_value(&hs, v, (size_t)(line_end - v)) != 0) {
                break;
            }
        }
        p = nl != NULL ? nl + 1 : end;
    }
    t = lg_tenants_new(&tc);
    rc = lg_tenant_resolve(t, conf[0], &hs, (data[0] & 0x40) ? "key-1" : NULL,
                           (data[0] & 0x40) ? &ks : NULL, 1000000000ull, &rs, &no);
    if (rc == LG_OK) {
        int max = (data[0] & 0x40) ? ks.max_class : LG_CLASS_INTERACTIVE;

        if (rs.cls >= LG_NCLASSES || rs.cls > LG_MAX(max, (data[0] & 0x40) ? ks.cls : 0)
            || rs.tenant == NULL || !lg_tenant_name_ok(rs.tenant->name, strlen(rs.tenant->name))
            || (rs.ttft_target_ms != 0) != (rs.deadline_ns != 0)) {
            abort();
        }
        lg_tenant_release(t, &rs);
    } else if ((no.status != 400 && no.status != 403) || no.param == NULL || no.code == NULL
               || no.message[0] == '\0') {
        abort();
    }
    lg_tenants_free(t);
    lg_hdrs_release(&hs);
    return 0;
}
