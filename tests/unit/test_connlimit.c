/*
 * test_connlimit.c: connections per source address: the limit, release,
 * IPv4 and IPv4-mapped IPv6 as one address, other families never limited.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/un.h>

#include "lg_test.h"
#include "serve/connlimit.h"

static struct sockaddr_storage
v4(const char *ip, uint16_t port)
{
    struct sockaddr_storage ss = { 0 };
    struct sockaddr_in *s = (struct sockaddr_in *)&ss;

    s->sin_family = AF_INET;
    s->sin_port = htons(port);
    inet_pton(AF_INET, ip, &s->sin_addr);
    return ss;
}

static struct sockaddr_storage
v6(const char *ip)
{
    struct sockaddr_storage ss = { 0 };
    struct sockaddr_in6 *s = (struct sockaddr_in6 *)&ss;

    s->sin6_family = AF_INET6;
    inet_pton(AF_INET6, ip, &s->sin6_addr);
    return ss;
}

#define SA(x) ((const struct sockaddr *)&(x))

static int
test_limit(void)
{
    struct lg_connlimit *t = lg_connlimit_new();
    struct sockaddr_storage a1 = v4("10.0.0.1", 1000), a2 = v4("10.0.0.1", 2000);
    struct sockaddr_storage b = v4("10.0.0.2", 1000), m = v6("::ffff:10.0.0.1");
    struct sockaddr_storage c = v6("2001:db8::1");

    LG_CHECK(lg_connlimit_acquire(t, SA(a1), 3));
    LG_CHECK(lg_connlimit_acquire(t, SA(a2), 3)); /* the port does not matter */
    LG_CHECK(lg_connlimit_acquire(t, SA(m), 3));  /* nor the family of a mapped address */
    LG_CHECK(!lg_connlimit_acquire(t, SA(a1), 3));
    LG_CHECK(lg_connlimit_count(t, SA(a1)) == 3);
    LG_CHECK(lg_connlimit_acquire(t, SA(b), 3));
    LG_CHECK(lg_connlimit_acquire(t, SA(c), 1) && !lg_connlimit_acquire(t, SA(c), 1));
    lg_connlimit_release(t, SA(a2));
    LG_CHECK(lg_connlimit_acquire(t, SA(a1), 3));
    /* 0 = unlimited, but counted all the same */
    for (int i = 0; i < 10; i++) {
        LG_CHECK(lg_connlimit_acquire(t, SA(b), 0));
    }
    LG_CHECK(lg_connlimit_count(t, SA(b)) == 11);
    for (int i = 0; i < 11; i++) {
        lg_connlimit_release(t, SA(b));
    }
    LG_CHECK(lg_connlimit_count(t, SA(b)) == 0);
    lg_connlimit_free(t); /* entries still counted are freed too */
    return 0;
}

static int
test_unlimited_kinds(void)
{
    struct lg_connlimit *t = lg_connlimit_new();
    struct sockaddr_un un = { .sun_family = AF_UNIX };
    struct sockaddr_storage a = v4("127.0.0.1", 1);

    for (int i = 0; i < 5; i++) {
        LG_CHECK(lg_connlimit_acquire(t, (struct sockaddr *)&un, 1));
    }
    lg_connlimit_release(t, (struct sockaddr *)&un);
    LG_CHECK(lg_connlimit_acquire(NULL, SA(a), 1)); /* no table: no limit */
    lg_connlimit_release(NULL, SA(a));
    lg_connlimit_free(t);
    lg_connlimit_free(NULL);
    return 0;
}

LG_TEST_MAIN(test_limit, test_unlimited_kinds)
