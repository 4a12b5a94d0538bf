/*
 * fuzz_llmsim_httpreq.c: llmsim's incremental HTTP request reader. The first
 * byte picks the limits and a split point; the input is read whole and in
 * two pieces, and both readings must see the same requests (method, path,
 * query, body length, keep-alive, vLLM's load-report header) and end the same
 * way (complete or in error).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "../../tools/llmsim/httpreq.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads `in` cut at the given points; returns a trace hash and counts requests. */
static uint64_t
read_all(const uint8_t *in, size_t len, const size_t *cuts, size_t ncuts, size_t max_head,
         size_t max_body, int *requests)
{
    struct lg_sim_httpreq r;
    uint64_t h = LG_HASH64_INIT;
    size_t off = 0;
    size_t c = 0;

    *requests = 0;
    lg_sim_httpreq_init(&r, max_head, max_body);
    while (off < len) {
        size_t end = c < ncuts && cuts[c] > off && cuts[c] < len ? cuts[c] : len;
        size_t k;
        enum lg_sim_httpreq_rc rc = lg_sim_httpreq_feed(&r, (const char *)in + off, end - off, &k);

        LG_BUG_ON(k > end - off);
        off += k;
        if (off == end && c < ncuts) {
            c++;
        }
        if (rc == LG_SIM_HTTPREQ_ERROR) {
            LG_BUG_ON(r.error_status < 400 || r.error_status > 599);
            /* not the status: bad and too long at once may read as 400 or 431
             * depending on where the bytes were cut */
            h = lg_hash64("error", 5, h);
            break;
        }
        if (rc == LG_SIM_HTTPREQ_DONE) {
            size_t plen, qlen;
            const char *path = lg_sim_httpreq_path(&r, &plen);
            const char *query = lg_sim_httpreq_query(&r, &qlen);

            LG_BUG_ON(plen > r.url_len || evbuffer_get_length(r.body) > max_body);
            LG_BUG_ON(qlen > 0 && (query != r.url + plen + 1 || plen + 1 + qlen != r.url_len));
            h = lg_hash64(path, plen, h);
            /* vLLM's load header: the first one's value, the same however the bytes came */
            if (r.load_seen) {
                h = lg_hash64(r.load_value, LG_MIN(r.load_value_len, sizeof(r.load_value)), h);
                h = lg_mix64(h ^ r.load_value_len);
            }
            h = lg_mix64(h ^ r.method ^ (evbuffer_get_length(r.body) << 8) ^ r.keep_alive);
            (*requests)++;
            lg_sim_httpreq_next(&r);
        }
    }
    lg_sim_httpreq_free(&r);
    return h;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t max_head;
    size_t max_body;
    size_t cut;
    int whole;
    int pieces;

    if (size < 1) {
        return 0;
    }
    max_head = 64 + (data[0] & 0x0f) * 64;
    max_body = 1 + (data[0] >> 4) * 40;
    data++;
    size--;
    cut = size ? (size_t)(data[0] % 97) % size : 0;
    LG_BUG_ON(read_all(data, size, NULL, 0, max_head, max_body, &whole)
              != read_all(data, size, &cut, 1, max_head, max_body, &pieces));
    LG_BUG_ON(whole != pieces);
    return 0;
}
