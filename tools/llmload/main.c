/*
 * main.c: llmload's entry point: parse flags, build the trace, run, report.
 * Owns: the options, the trace until the run takes it, the run.
 * Exit status: 0 when the run completed (request errors are data, not
 * failures), 2 on bad usage, 1 when it could not run at all.
 */
#include <stdio.h>
#include <stdlib.h>

#include "lg_version.h"
#include "llmload.h"

static int
main_dry_run(const struct lg_ld_opts *o, struct lg_ld_item *items, size_t n)
{
    struct lg_ld_gen g;
    double span;

    if (o->mode == LG_LD_MODE_CLOSED) {
        /* Closed loop has no arrival times: list the contents it would send. */
        n = (size_t)o->requests;
        items = lg_xcalloc(LG_MAX(n, 1), sizeof(*items));
        lg_ld_gen_init(&g, o);
        for (size_t i = 0; i < n; i++) {
            lg_ld_gen_contents(&g, &items[i]);
        }
        lg_ld_gen_free(&g);
    }
    if (o->trace_out != NULL && lg_ld_trace_write(o->trace_out, items, n) != LG_OK) {
        lg_ld_items_free(items, n);
        return 1;
    }
    span = n > 0 ? (double)items[n - 1].t_us / 1e6 : 0;
    printf("llmload: dry run: %zu requests over %.3f s (%.1f/s)\n", n, span,
           span > 0 ? (double)n / span : 0);
    lg_ld_items_free(items, n);
    return 0;
}

int
main(int argc, char **argv)
{
    struct lg_ld_opts o;
    struct lg_ld_item *items = NULL;
    struct lg_ld_run *run = NULL;
    struct lg_ld_result res;
    char err[512];
    size_t n = 0;
    int rc;

    rc = lg_ld_opts_parse(&o, argc, argv, err, sizeof(err));
    if (rc == LG_LD_OPTS_HELP) {
        lg_ld_opts_usage(stdout);
        lg_ld_opts_free(&o);
        return 0;
    }
    if (rc == LG_LD_OPTS_VERSION) {
        printf("llmload %s (%s)\n", LG_VERSION, LG_GIT_REV);
        lg_ld_opts_free(&o);
        return 0;
    }
    if (rc != LG_OK) {
        fprintf(stderr, "llmload: %s\n(llmload --help lists the flags)\n", err);
        lg_ld_opts_free(&o);
        return 2;
    }
    rc = lg_ld_trace_build(&o, &items, &n, err, sizeof(err));
    if (rc != LG_OK) {
        fprintf(stderr, "llmload: %s\n", err);
        lg_ld_opts_free(&o);
        return rc == LG_EINVAL ? 2 : 1;
    }
    if (o.dry_run) {
        rc = main_dry_run(&o, items, n);
        lg_ld_opts_free(&o);
        return rc;
    }
    if (o.mode != LG_LD_MODE_CLOSED && o.trace_out != NULL
        && lg_ld_trace_write(o.trace_out, items, n) != LG_OK) {
        lg_ld_items_free(items, n);
        lg_ld_opts_free(&o);
        return 1;
    }
    /* The run owns items from here, even when it fails. */
    if (lg_ld_run_new(&run, &o, items, n) != LG_OK || lg_ld_run_go(run, &res) != LG_OK) {
        lg_ld_run_free(run);
        lg_ld_opts_free(&o);
        return 1;
    }
    rc = 0;
    if (o.mode == LG_LD_MODE_CLOSED && o.trace_out != NULL
        && lg_ld_trace_write(o.trace_out, res.items, res.n) != LG_OK) {
        rc = 1;
    }
    lg_ld_report_table(&res, stdout);
    fflush(stdout);
    if (o.json_path != NULL && lg_ld_report_json(&res, o.json_path) != LG_OK) {
        rc = 1;
    }
    if (o.log_path != NULL && lg_ld_report_log(&res, o.log_path) != LG_OK) {
        rc = 1;
    }
    lg_ld_run_free(run);
    lg_ld_opts_free(&o);
    return rc;
}
