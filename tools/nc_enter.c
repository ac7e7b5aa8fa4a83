/*
 * Enter a namespace-cluster node from a forked rank (see nc_enter.h).
 */
#define _GNU_SOURCE
#include "nc_enter.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Read the one integer in dir/name; -1 if missing or not a number. */
static int nc_read_int(const char *dir, const char *name)
{
    char  path[PATH_MAX];
    FILE *f;
    int   v = -1;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "r");
    if (f == NULL) {
        return -1;
    }
    if (fscanf(f, "%d", &v) != 1) {
        v = -1;
    }
    fclose(f);
    return v;
}

int nc_nodes(void)
{
    const char *dir = getenv("NSP_NETCLUSTER");
    int         k;

    if (dir == NULL || dir[0] == '\0') {
        return 0;
    }
    k = nc_read_int(dir, "nodes");
    return k > 0 ? k : 0;
}

/* setns into dir/n<node>.<kind> (nstype: CLONE_NEW*); 0 or -1 with why. */
static int nc_setns(const char *dir, int node, const char *kind, int nstype, char *why,
                    size_t whylen)
{
    char path[PATH_MAX];
    int  fd, rc;

    snprintf(path, sizeof(path), "%s/n%d.%s", dir, node, kind);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, whylen, "netcluster: open %s: %s", path, strerror(errno));
        return -1;
    }
    rc = setns(fd, nstype);
    if (rc != 0) {
        snprintf(why, whylen, "netcluster: setns %s: %s (needs root)", path, strerror(errno));
    }
    close(fd);
    return rc == 0 ? 0 : -1;
}

int nc_enter_node(int rank, int nranks, int *node, char *why, size_t whylen)
{
    const char *dir = getenv("NSP_NETCLUSTER");
    char        cwd[PATH_MAX];
    int         k, n;

    if (node != NULL) {
        *node = -1;
    }
    if (dir == NULL || dir[0] == '\0') {
        return 0;
    }
    k = nc_read_int(dir, "nodes");
    if (k < 1 || nranks < 1 || rank < 0 || rank >= nranks) {
        snprintf(why, whylen, "netcluster: %s/nodes unreadable or rank %d of %d", dir, rank,
                 nranks);
        return -1;
    }
    n = (int)((long)rank * k / nranks);
    if (getcwd(cwd, sizeof(cwd)) == NULL) {
        snprintf(why, whylen, "netcluster: getcwd: %s", strerror(errno));
        return -1;
    }
    /* the mount namespace last: the state files are reached through ours */
    if (nc_setns(dir, n, "net", CLONE_NEWNET, why, whylen) != 0 ||
        nc_setns(dir, n, "uts", CLONE_NEWUTS, why, whylen) != 0 ||
        nc_setns(dir, n, "mnt", CLONE_NEWNS, why, whylen) != 0) {
        return -1;
    }
    /* entering a mount namespace moves the working directory to its root */
    if (chdir(cwd) != 0) {
        snprintf(why, whylen, "netcluster: chdir %s: %s", cwd, strerror(errno));
        return -1;
    }
    if (node != NULL) {
        *node = n;
    }
    return 0;
}
