/*
 * fuzz_budget_reply.c: what the budget store reads of Redis's answers to its
 * script (lg_budgetstore_read_sums() in gateway/serve/budgetstore.c), on
 * arbitrary bytes of the RESP protocol as hiredis's reader parses them.
 *
 * The first byte picks a split point; the rest is fed to the reader in two
 * pieces and every reply it completes is read as the store reads it. A
 * reply is taken only when it is an array of exactly two non-negative
 * integers, and then the sums are those integers; anything else is refused
 * with a reason (printable, never empty), and nothing crashes or leaks.
 * hiredis 0.14's reader allocates the elements an array header declares
 * before they come (1.0 bounds them with maxelements): inputs declaring
 * more than 4096 are left out, they would only measure malloc.
 */
#include <hiredis/hiredis.h>
#include <hiredis/read.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/budgetstore.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check_reply(const redisReply *r)
{
    uint64_t sums[2] = { 7, 7 };
    char why[160] = "";
    int rc = lg_budgetstore_read_sums(r, sums, why, sizeof(why));
    bool shape = r->type == REDIS_REPLY_ARRAY && r->elements == 2
                 && r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer >= 0
                 && r->element[1]->type == REDIS_REPLY_INTEGER && r->element[1]->integer >= 0;

    if ((rc == LG_OK) != shape) {
        abort();
    }
    if (rc == LG_OK
        && (sums[0] != (uint64_t)r->element[0]->integer
            || sums[1] != (uint64_t)r->element[1]->integer)) {
        abort();
    }
    if (rc != LG_OK
        && (rc != LG_EPROTO || why[0] == '\0' || memchr(why, '\0', sizeof(why)) == NULL)) {
        abort();
    }
    for (size_t i = 0; rc != LG_OK && why[i] != '\0'; i++) {
        if ((unsigned char)why[i] < 0x20 || (unsigned char)why[i] >= 0x7f) {
            abort(); /* it goes into log lines */
        }
    }
}

static bool
declares_a_huge_array(const uint8_t *data, size_t size)
{
    for (size_t i = 0; i < size; i++) {
        uint64_t n = 0;
        size_t k = i + 1;

        if (data[i] != '*') {
            continue;
        }
        while (k < size && data[k] >= '0' && data[k] <= '9' && n <= 4096) {
            n = n * 10 + (uint64_t)(data[k++] - '0');
        }
        if (n > 4096) {
            return true;
        }
    }
    return false;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    redisReader *rd;
    size_t split;
    void *reply;

    if (size == 0 || declares_a_huge_array(data, size)) {
        return 0;
    }
    split = size > 1 ? data[0] % size : 0;
    data++;
    size--;
    split = LG_MIN(split, size);
    rd = redisReaderCreate();
    if (rd == NULL) {
        return 0;
    }
    for (int piece = 0; piece < 2; piece++) {
        const uint8_t *p = piece == 0 ? data : data + split;
        size_t n = piece == 0 ? split : size - split;

        if (n > 0 && redisReaderFeed(rd, (const char *)p, n) != REDIS_OK) {
            break;
        }
        for (;;) {
            reply = NULL;
            if (redisReaderGetReply(rd, &reply) != REDIS_OK) {
                piece = 2; /* a protocol error: the reader is done */
                break;
            }
            if (reply == NULL) {
                break; /* more bytes needed */
            }
            check_reply(reply);
            freeReplyObject(reply);
        }
    }
    {
        uint64_t sums[2];
        char why[32];

        if (lg_budgetstore_read_sums(NULL, sums, why, sizeof(why)) != LG_EPROTO) {
            abort(); /* the connection went: no reply at all */
        }
    }
    redisReaderFree(rd);
    return 0;
}
