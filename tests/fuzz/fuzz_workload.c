/* Fuzz target: workload files (nsp_workload_load), through an in-memory
 * file (memfd) so every input is read exactly as a file is; then one
 * sample of a few sequences from what loaded. */
#define _GNU_SOURCE /* memfd_create */
#include "fuzz.h"

#include "nspcomm.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

int FUZZ_ENTRY(const uint8_t *data, size_t size)
{
    static int      fd = -1; /* one in-memory file, rewritten for each input */
    nsp_workload_t *w  = NULL;
    char            path[64];

    if (fd < 0) {
        fd = memfd_create("nsp-fuzz-workload", MFD_CLOEXEC);
    }
    if (fd < 0 || ftruncate(fd, 0) != 0) {
        return 0;
    }
    fuzz_quiet();
    if (pwrite(fd, data, size, 0) == (ssize_t)size) {
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        if (nsp_workload_load(path, &w) == NSP_OK) {
            int64_t *lens  = NULL;
            int      count = 0;
            if (nsp_workload_sample(w, size, 0, 1 << 16, 1 << 12, &lens, &count) == NSP_OK) {
                free(lens);
            }
            nsp_workload_free(w);
        }
    }
    return 0;
}
