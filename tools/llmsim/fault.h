/*
 * fault.h: llmsim's fault schedule: the SPEC parser and the queries that say
 * which faults are in effect at a given time. Pure logic, no I/O: the replica
 * (sim.c) arms a timer for lg_sim_faults_next_edge() and acts on the edges.
 *
 * SPEC syntax (T, D, F: decimal seconds or factor, e.g. 2 or 0.25):
 *   slow@T:F[:D]                  F times slower from T, for D seconds (no D: for good)
 *   stall@T[:D]                   accept and read requests, answer nothing, emit no token
 *   status@T:CODE:D[:RETRY_AFTER] answer CODE (400..599) with Retry-After for D seconds
 *   crash@T[:reset]               exit(1) abruptly at T; with reset, every open connection
 *                                 is reset (RST) instead of closed (FIN)
 *   close-after-tokens:N          close every generation's connection after N tokens
 *   stall-random:RATE:D           stalls (as stall@) that begin at random, RATE a second on
 *                                 average (Poisson), each D seconds long
 *   stall-first:P:D               each generation's first token held D seconds with
 *                                 probability P (0..1), as a preempted sequence waits
 * T counts from the schedule's origin: process start for --fault, the
 * control request for POST /sim/control; the random ones start there and
 * last for good. Their draws come from a seed the caller sets (the
 * replica's --seed), so a run is reproducible.
 */
#ifndef LG_SIM_FAULT_H
#define LG_SIM_FAULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum lg_sim_fault_kind {
    LG_SIM_FAULT_SLOW = 0,
    LG_SIM_FAULT_STALL,
    LG_SIM_FAULT_STATUS,
    LG_SIM_FAULT_CRASH,
    LG_SIM_FAULT_CLOSE_AFTER_TOKENS,
    LG_SIM_FAULT_STALL_RANDOM,
    LG_SIM_FAULT_STALL_FIRST,
};

#define LG_SIM_FAULT_FOREVER UINT64_MAX
#define LG_SIM_FAULTS_MAX    64
#define LG_SIM_FAULT_MAX_S   1000000.0 /* bound on T and D */

struct lg_sim_fault {
    enum lg_sim_fault_kind kind;
    uint64_t start_ns; /* after parse: offset from the origin; once added: CLOCK_MONOTONIC */
    uint64_t end_ns;   /* same; LG_SIM_FAULT_FOREVER = no end */
    double factor;     /* slow: F */
    int status;        /* status: CODE */
    int retry_after_s; /* status: RETRY_AFTER, or -1 = the rest of the window */
    uint32_t tokens;   /* close-after-tokens: N */
    double rate;       /* stall-random: stalls a second */
    double prob;       /* stall-first: P */
    uint64_t hold_ns;  /* stall-random, stall-first: D */
    bool reset;        /* crash: reset the open connections (RST) rather than close them */
    uint64_t seed;     /* random ones: set by the caller before lg_sim_faults_add() */
    uint64_t rng;      /* stall-random: the draws' state */
    uint64_t win_start_ns; /* stall-random: the current or next stall (CLOCK_MONOTONIC) */
    uint64_t win_end_ns;
};

/*
 * Parses one SPEC. On error returns LG_EINVAL and writes a one-line reason
 * into err (errlen > 0 bytes, always terminated).
 */
int lg_sim_fault_parse(const char *spec, struct lg_sim_fault *out, char *err, size_t errlen);

/* Writes the SPEC text of f (times relative to origin_ns) into buf. */
void lg_sim_fault_format(const struct lg_sim_fault *f, uint64_t origin_ns, char *buf, size_t len);

struct lg_sim_faults {
    struct lg_sim_fault list[LG_SIM_FAULTS_MAX];
    size_t n;
};

/* Adds a parsed fault, its times made absolute from origin_ns. LG_EBUSY when full. */
int lg_sim_faults_add(struct lg_sim_faults *fs, const struct lg_sim_fault *f, uint64_t origin_ns);
void lg_sim_faults_clear(struct lg_sim_faults *fs);
/* Forgets faults whose window ended at or before now; draws the random stalls that follow
 * those ended by now. */
void lg_sim_faults_prune(struct lg_sim_faults *fs, uint64_t now);

/* Product of the factors of the slow faults in effect (1.0 when none). */
double lg_sim_faults_slowdown(const struct lg_sim_faults *fs, uint64_t now);
bool lg_sim_faults_stalled(const struct lg_sim_faults *fs, uint64_t now);
/* The status fault in effect (the latest added wins): its code and Retry-After seconds. */
bool lg_sim_faults_status(const struct lg_sim_faults *fs, uint64_t now, int *status,
                          uint32_t *retry_after_s);
/* A crash is due at now; *reset: one of those due asks for the connections reset. */
bool lg_sim_faults_crash_due(const struct lg_sim_faults *fs, uint64_t now, bool *reset);
/* Token count after which generations are cut; 0 = none. The smallest in effect wins. */
uint32_t lg_sim_faults_close_after(const struct lg_sim_faults *fs, uint64_t now);
/*
 * How long a generation arriving now holds its first token (0: not held):
 * each stall-first fault in effect holds it with its probability, drawn from
 * its seed and `draw` (the request's rank on the replica); the longest wins.
 */
uint64_t lg_sim_faults_first_hold(const struct lg_sim_faults *fs, uint64_t now, uint64_t draw);
/* The next start or end strictly after now; LG_SIM_FAULT_FOREVER when none. */
uint64_t lg_sim_faults_next_edge(const struct lg_sim_faults *fs, uint64_t now);

#endif /* LG_SIM_FAULT_H */
