/*
 * bevio.h: write a socket bufferevent's output in the current loop iteration.
 */
#ifndef LG_BEVIO_H
#define LG_BEVIO_H

struct bufferevent;
struct event_base;

/* Learns what a plain socket bufferevent looks like (once, any base). */
void lg_bevio_init(struct event_base *base);

/*
 * If bev is a plain socket bufferevent waiting to write, runs its write now
 * (later in this loop iteration) instead of after the next epoll_wait. Safe
 * on any bufferevent: TLS and filter ones, and those not waiting to write,
 * are left alone. Never on a socket whose connect is still in progress.
 */
void lg_bevio_flush(struct bufferevent *bev);

#endif /* LG_BEVIO_H */
