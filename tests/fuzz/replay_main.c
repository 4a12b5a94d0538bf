/*
 * replay_main.c: runs a libFuzzer target over every file of a corpus folder,
 * so that every build (gcc included) exercises each fuzz target in CTest.
 * Each input is also replayed split at every 97th byte boundary by the target
 * itself (targets take their split point from the first byte).
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int
replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf;
    long n;

    if (f == NULL) {
        perror(path);
        return -1;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return -1;
    }
    buf = malloc((size_t)n + 1);
    if (buf == NULL || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        fclose(f);
        return -1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)n);
    free(buf);
    return 0;
}

int
main(int argc, char **argv)
{
    int files = 0;

    for (int i = 1; i < argc; i++) {
        struct stat st;
        DIR *d;
        struct dirent *e;

        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (replay_file(argv[i]) != 0) {
                return 1;
            }
            files++;
            continue;
        }
        d = opendir(argv[i]);
        if (d == NULL) {
            perror(argv[i]);
            return 1;
        }
        while ((e = readdir(d)) != NULL) {
            char path[4096];

            if (e->d_name[0] == '.') {
                continue;
            }
            snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
            if (replay_file(path) != 0) {
                closedir(d);
                return 1;
            }
            files++;
        }
        closedir(d);
    }
    printf("replayed %d inputs\n", files);
    return files > 0 ? 0 : 1;
}
