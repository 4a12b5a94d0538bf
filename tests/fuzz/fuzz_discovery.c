/*
 * fuzz_discovery.c: DNS templates expanded into backends. Any configuration
 * that loads must expand for any set of addresses: every address of every
 * enabled template becomes one backend, the others stay as they were, and
 * nothing leaks. The addresses come from the input's own bytes.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/config.h"
#include "fleet/discovery.h"

#define FUZZ_MAX_ADDRS 6

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
fuzz_addr(struct sockaddr_storage *ss, uint64_t h, uint32_t port)
{
    memset(ss, 0, sizeof(*ss));
    if (h & 1) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        memcpy(&s6->sin6_addr, &h, sizeof(h));
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)ss;

        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        s4->sin_addr.s_addr = (uint32_t)(h >> 8);
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct lg_config *base = NULL;
    struct lg_config *out = NULL;
    struct lg_discovery_set *sets;
    struct sockaddr_storage *addrs;
    uint64_t h = lg_hash64(data, size, LG_HASH64_INIT);
    size_t expect;
    size_t n;

    if (lg_config_load_buffer_flags((const char *)data, size, "f.json", LG_CONFIG_F_NO_RESOLVE,
                                    &base, NULL)
        != LG_OK) {
        return 0;
    }
    sets = calloc(base->ntemplates + 1, sizeof(*sets));
    addrs = calloc((base->ntemplates + 1) * FUZZ_MAX_ADDRS, sizeof(*addrs));
    expect = base->nbackends;
    for (size_t i = 0; i < base->ntemplates; i++) {
        const struct lg_discover_conf *dv = &base->templates[i].discover;
        bool dup = false;

        /* one set per (dns, port), as the resolver keeps them */
        for (size_t k = 0; k < i && !dup; k++) {
            dup = sets[k].port == dv->port && sets[k].dns != NULL
                  && strcmp(sets[k].dns, dv->dns) == 0;
        }
        h = lg_mix64(h + i);
        n = dup ? 0 : h % (FUZZ_MAX_ADDRS + 1);
        for (size_t k = 0; k < n; k++) {
            /* distinct addresses: a counter in the high bits */
            fuzz_addr(&addrs[i * FUZZ_MAX_ADDRS + k],
                      (lg_mix64(h + k) & ~0xffull) | (k << 1) | (h & 1), dv->port);
        }
        sets[i] = (struct lg_discovery_set){ .dns = dup ? NULL : dv->dns,
                                             .port = dv->port,
                                             .addrs = &addrs[i * FUZZ_MAX_ADDRS],
                                             .n = n };
    }
    for (size_t i = 0; i < base->ntemplates; i++) {
        for (size_t k = 0; k < base->ntemplates; k++) {
            if (sets[k].dns != NULL && sets[k].port == base->templates[i].discover.port
                && strcmp(sets[k].dns, base->templates[i].discover.dns) == 0) {
                expect += sets[k].n;
                break;
            }
        }
    }
    for (size_t i = 0; i < base->ntemplates; i++) {
        if (sets[i].dns == NULL) {
            sets[i].dns = "";
        }
    }
    if (lg_discovery_expand_with(base, sets, base->ntemplates, &out, NULL) != LG_OK) {
        if (expect <= 4096) {
            abort(); /* a loaded configuration always expands, up to the backend limit */
        }
    } else if (out->nbackends != expect || out->ntemplates != base->ntemplates) {
        abort();
    }
    lg_config_unref(out);
    lg_config_unref(base);
    free(addrs);
    free(sets);
    return 0;
}
