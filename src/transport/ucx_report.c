/*
 * The transport report of a UCX world: which UCX transports reach each peer
 * (shared memory inside a node, tcp across), parsed from ucp_ep_print_info's
 * "lane[i]:  n:tl/dev md[m] ..." lines.
 */
#define _GNU_SOURCE
#include "transport/ucx_report.h"

#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Append word to buf[len] (space-separated) unless it is there already. */
static void lanes_add(char *buf, size_t len, const char *word, size_t wlen)
{
    size_t used = strlen(buf);

    for (const char *p = buf; (p = strstr(p, word)) != NULL; p += wlen) {
        if ((p == buf || p[-1] == ' ') && (p[wlen] == ' ' || p[wlen] == '\0') &&
            strncmp(p, word, wlen) == 0) {
            return;
        }
    }
    if (used + wlen + 2 > len) {
        return;
    }
    if (used > 0) {
        buf[used++] = ' ';
    }
    memcpy(buf + used, word, wlen);
    buf[used + wlen] = '\0';
}

/* One "lane[i]:  n:tl/dev md..." line: add "tl/dev". */
static void lanes_parse_line(const char *line, char *buf, size_t len)
{
    const char *p = strstr(line, "lane[");
    size_t      n;

    if (p == NULL || (p = strchr(p, ':')) == NULL) {
        return;
    }
    p += strspn(p + 1, " ") + 1;         /* resource index */
    p += strspn(p, "0123456789");
    if (*p != ':') {
        return;
    }
    ++p;
    n = strcspn(p, " \t\n");
    if (n > 0 && memchr(p, '/', n) != NULL) {
        lanes_add(buf, len, p, n);
    }
}

void nsp_ucx_ep_lanes(ucp_ep_h ep, char *buf, size_t len)
{
    char  *text = NULL;
    size_t size = 0;
    FILE  *mem  = open_memstream(&text, &size);

    if (len == 0) {
        return;
    }
    buf[0] = '\0';
    if (mem != NULL) {
        ucp_ep_print_info(ep, mem);
        fclose(mem);
        for (char *line = text, *next; line != NULL && *line != '\0'; line = next) {
            next = strchr(line, '\n');
            if (next != NULL) {
                *next++ = '\0';
            }
            lanes_parse_line(line, buf, len);
        }
    }
    free(text);
    if (buf[0] == '\0') {
        snprintf(buf, len, "?");
    }
}

void nsp_ucx_report(int me, int nranks, ucp_ep_h const *eps, const int *same_host)
{
    char   line[2048] = "";
    size_t used       = 0;

    if (!nsp_log_enabled(NSP_LOG_INFO)) {
        return;
    }
    for (int r = 0; r < nranks && used + 2 < sizeof(line); ++r) {
        char lanes[256];
        int  n;

        if (r == me || eps[r] == NULL) {
            continue;
        }
        nsp_ucx_ep_lanes(eps[r], lanes, sizeof(lanes));
        n = snprintf(line + used, sizeof(line) - used, "%s%d%s:{%s}", used ? " " : "", r,
                     same_host[r] ? "" : "*", lanes);
        used = n < 0 ? used : used + (size_t)n < sizeof(line) ? used + (size_t)n : sizeof(line);
    }
    NSP_INFO("ucx: rank %d of %d reaches (peer{lanes}, * = other host) %s", me, nranks, line);
}
