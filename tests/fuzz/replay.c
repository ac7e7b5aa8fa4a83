/*
 * `make check` side of the fuzz targets: every committed input of one
 * corpus (tests/fuzz/corpus/FUZZ_NAME: the seeds and every input a fuzzer
 * ever found a bug with) through that target's harness, built with the
 * ordinary compiler (and with ASan/UBSan in the sanitizer build). A crash or
 * a harness abort fails the test; so does an empty or missing corpus.
 */
#include "fuzz.h"

#include "../tap.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Read a whole file; NULL if it cannot be read. */
static uint8_t *read_all(const char *path, size_t *len)
{
    FILE    *f   = fopen(path, "rb");
    uint8_t *buf = NULL;
    long     n;

    if (f == NULL) {
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        buf = malloc((size_t)n + 1);
        if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        }
        *len = (size_t)n;
    }
    fclose(f);
    return buf;
}

int main(void)
{
    const char    *top = getenv("NSP_TOP_SRCDIR");
    char           dir[1024], path[2048];
    struct dirent *e;
    DIR           *d;
    int            count = 0, unreadable = 0;

    snprintf(dir, sizeof(dir), "%s/tests/fuzz/corpus/%s", top != NULL ? top : ".", FUZZ_NAME);
    d = opendir(dir);
    if (d == NULL) {
        tap_ok(0, "corpus %s exists", dir);
        return tap_done();
    }
    while ((e = readdir(d)) != NULL) {
        size_t   len = 0;
        uint8_t *buf;
        if (e->d_name[0] == '.') {
            continue;
        }
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        buf = read_all(path, &len);
        if (buf == NULL) {
            ++unreadable;
            continue;
        }
        FUZZ_ENTRY(buf, len);
        free(buf);
        ++count;
    }
    closedir(d);
    tap_ok(count > 0 && unreadable == 0,
           "%s: %d corpus inputs replayed through the harness, no crash, no abort (%d "
           "unreadable)",
           FUZZ_NAME, count, unreadable);
    return tap_done();
}
