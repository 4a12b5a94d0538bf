/*
 * main.c: argv, signals, startup and shutdown order, exit codes.
 */
#include <stdio.h>
#include <string.h>

#include "lg_core.h"
#include "lg_version.h"

int
main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--version") == 0) {
        printf("llmgate %s (%s)\n", LG_VERSION, LG_GIT_REV);
        return 0;
    }
    fprintf(stderr, "usage: llmgate -c FILE\n");
    return 2;
}
