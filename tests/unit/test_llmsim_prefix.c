/*
 * test_llmsim_prefix.c: llmsim's prefix cache (LRU over block keys, table
 * layout shared with llmsim_shm.h readers) and the prompt hasher.
 */
#include <stdlib.h>
#include <string.h>

#include "../../tools/llmsim/prefix.c"
#include "lg_test.h"

/* Keys of `text` with blocks of `block_tokens` tokens, fed in pieces of `piece` bytes. */
static uint32_t
keys_of(const char *text, uint32_t block_tokens, size_t piece, uint64_t **keys)
{
    struct lg_sim_prefix_hasher hs;
    size_t len = strlen(text);
    uint32_t n;

    lg_sim_prefix_hasher_init(&hs, block_tokens, 1000);
    for (size_t off = 0; off < len; off += piece) {
        lg_sim_prefix_hasher_feed(&hs, text + off, LG_MIN(piece, len - off));
    }
    *keys = lg_sim_prefix_hasher_take(&hs, &n);
    lg_sim_prefix_hasher_free(&hs);
    return n;
}

static uint64_t
whole_hash(const char *text, size_t n)
{
    struct lg_hstream st;

    lg_hstream_init(&st);
    lg_hstream_feed(&st, text, n);
    return lg_hstream_value(&st);
}

/*
 * The stream hash (llmgate/hstream.h, also the gateway's prefix hash): the
 * same value however the bytes are cut, different for a byte changed or
 * added.
 */
static int
test_hstream(void)
{
    unsigned char buf[100];
    uint64_t seed = 0x243f6a8885a308d3ull;

    for (size_t i = 0; i < sizeof(buf); i++) {
        buf[i] = (unsigned char)lg_mix64(seed++);
    }
    for (size_t len = 0; len <= sizeof(buf); len++) {
        uint64_t want = whole_hash((const char *)buf, len);

        for (int round = 0; round < 8; round++) {
            struct lg_hstream st;
            size_t off = 0;

            lg_hstream_init(&st);
            while (off < len) {
                size_t cut = (size_t)(lg_mix64(seed++) % 11), k = LG_MIN(len - off, cut);

                lg_hstream_feed(&st, buf + off, k);
                off += k;
                LG_CHECK(lg_hstream_value(&st) == whole_hash((const char *)buf, off));
            }
            LG_CHECK(lg_hstream_value(&st) == want);
        }
        if (len > 0) {
            buf[len - 1] ^= 0x20;
            LG_CHECK(whole_hash((const char *)buf, len) != want);
            buf[len - 1] ^= 0x20;
            LG_CHECK(whole_hash((const char *)buf, len - 1) != want);
        }
    }
    /* a zero byte more is another stream */
    LG_CHECK(whole_hash("ab\0", 3) != whole_hash("ab", 2));
    LG_CHECK(whole_hash("abcdefgh\0", 9) != whole_hash("abcdefgh", 8));
    return 0;
}

static int
test_hasher(void)
{
    const char *text = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"; /* 46 bytes */
    uint64_t *a;
    uint64_t *b;
    uint64_t *c;
    uint32_t na = keys_of(text, 2, 46, &a); /* 8-byte blocks: 5 whole ones */
    uint32_t nb = keys_of(text, 2, 3, &b);
    uint32_t nc = keys_of("0123456789abcdefXhijklmnop", 2, 5, &c);

    LG_CHECK(na == 5 && nb == 5 && nc == 3);
    LG_CHECK(memcmp(a, b, na * sizeof(*a)) == 0); /* independent of how text arrives */
    /* block i hashes everything up to its end */
    LG_CHECK(a[0] == llmsim_shm_key(whole_hash(text, 8)));
    LG_CHECK(a[3] == llmsim_shm_key(whole_hash(text, 32)));
    LG_CHECK(c[0] == a[0] && c[1] == a[1] && c[2] != a[2]); /* diverges at byte 16 */
    free(a);
    free(b);
    free(c);
    LG_CHECK(keys_of(text, 0, 7, &a) == 0 && a == NULL); /* block size 0: no keys */
    return 0;
}

static int
test_lru(void)
{
    struct lg_sim_prefix p;
    uint64_t k[8] = { 11, 12, 13, 14, 15, 16, 17, 18 };

    LG_CHECK(lg_sim_prefix_init(&p, 4, NULL, NULL) == LG_OK);
    LG_CHECK(lg_sim_prefix_match(&p, k, 3) == 0);
    lg_sim_prefix_insert(&p, k, 3); /* 11 12 13 */
    LG_CHECK(lg_sim_prefix_match(&p, k, 8) == 3);
    LG_CHECK(lg_sim_prefix_match(&p, k + 1, 2) == 2);
    lg_sim_prefix_insert(&p, k + 3, 1);            /* full: 11 12 13 14 */
    LG_CHECK(lg_sim_prefix_lookup(&p, k, 1) == 1); /* 11 becomes most recent */
    lg_sim_prefix_insert(&p, k + 4, 2);            /* evicts 12 then 13 */
    LG_CHECK(lg_sim_prefix_contains(&p, 11) && lg_sim_prefix_contains(&p, 14));
    LG_CHECK(!lg_sim_prefix_contains(&p, 12) && !lg_sim_prefix_contains(&p, 13));
    LG_CHECK(lg_sim_prefix_contains(&p, 15) && lg_sim_prefix_contains(&p, 16));
    LG_CHECK(lg_sim_prefix_match(&p, k, 8) == 1); /* a hole stops the match */
    LG_CHECK(p.used == 4);
    lg_sim_prefix_free(&p);

    LG_CHECK(lg_sim_prefix_init(&p, 0, NULL, NULL) == LG_OK); /* disabled */
    lg_sim_prefix_insert(&p, k, 8);
    LG_CHECK(lg_sim_prefix_lookup(&p, k, 8) == 0 && !lg_sim_prefix_contains(&p, 11));
    lg_sim_prefix_free(&p);
    return 0;
}

/* The cache against a plain model (an array in LRU order), over random operations,
 * with keys that collide in the table; the shm reader sees the same content. */
static int
test_random_against_model(void)
{
    enum { CAP = 37, KEYS = 200, OPS = 20000 };
    struct lg_sim_prefix p;
    uint64_t model[CAP];
    size_t nmodel = 0;
    uint64_t rng = 42;
    uint32_t slots = lg_sim_prefix_table_slots(CAP);
    struct llmsim_shm_block *blocks = calloc(CAP, sizeof(*blocks));
    uint32_t *table = calloc(slots, sizeof(*table));

    LG_CHECK(slots == 128);
    LG_CHECK(lg_sim_prefix_init(&p, CAP, blocks, table) == LG_OK);
    for (int op = 0; op < OPS; op++) {
        uint64_t key;
        size_t i;

        rng = lg_mix64(rng);
        key = 1 + rng % KEYS;
        for (i = 0; i < nmodel && model[i] != key; i++) {
        }
        if (lg_sim_prefix_contains(&p, key) != (i < nmodel)) {
            fprintf(stderr, "op %d: key %" PRIu64 " presence differs\n", op, key);
            return 1;
        }
        if ((rng >> 32) % 3 == 0) {
            lg_sim_prefix_lookup(&p, &key, 1); /* touch when present */
            if (i == nmodel) {
                continue;
            }
        } else {
            lg_sim_prefix_insert(&p, &key, 1);
        }
        /* move or insert at the front, dropping the last when full */
        if (i == nmodel) {
            if (nmodel == CAP) {
                nmodel--;
            }
            i = nmodel++;
        }
        memmove(model + 1, model, i * sizeof(*model));
        model[0] = key;
    }
    /* LRU order from most recent */
    {
        uint32_t e = p.mru;

        for (size_t i = 0; i < nmodel; i++) {
            LG_CHECK(e != 0 && blocks[e - 1].key == model[i]);
            e = blocks[e - 1].next;
        }
        LG_CHECK(e == 0);
    }
    lg_sim_prefix_free(&p); /* external memory stays */
    free(blocks);
    free(table);
    return 0;
}

/* llmsim_shm_cached_blocks() reads the cache through the shared layout. */
static int
test_shm_reader(void)
{
    struct {
        struct llmsim_shm h;
        struct llmsim_shm_block blocks[16];
        uint32_t table[32];
    } m;
    struct lg_sim_prefix p;
    const char *prompt = "system: be brief. user: what is the capital of France? thanks";
    uint64_t *keys;
    uint32_t n = keys_of(prompt, 2, 64, &keys); /* 8-byte blocks: 7 */

    memset(&m, 0, sizeof(m));
    m.h.size = sizeof(m);
    m.h.prefix_block_tokens = 2;
    m.h.prefix_cache_blocks = 16;
    m.h.prefix_table_mask = lg_sim_prefix_table_slots(16) - 1;
    m.h.block_off = offsetof(__typeof__(m), blocks);
    m.h.table_off = offsetof(__typeof__(m), table);
    LG_CHECK(m.h.prefix_table_mask == 31);
    LG_CHECK(lg_sim_prefix_init(&p, 16, m.blocks, m.table) == LG_OK);
    LG_CHECK(n == 7);
    LG_CHECK(llmsim_shm_cached_blocks(&m.h, prompt, strlen(prompt)) == 0);
    lg_sim_prefix_insert(&p, keys, 4);
    LG_CHECK(llmsim_shm_cached_blocks(&m.h, prompt, strlen(prompt)) == 4);
    LG_CHECK(llmsim_shm_cached_blocks(&m.h, prompt, 20) == 2); /* whole blocks only */
    LG_CHECK(llmsim_shm_cached_blocks(&m.h, "system: be Brief", 16) == 1);
    free(keys);
    lg_sim_prefix_free(&p);
    return 0;
}

LG_TEST_MAIN(test_hstream, test_hasher, test_lru, test_random_against_model, test_shm_reader)
