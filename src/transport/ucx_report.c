/*
 * The transport report of a UCX world: which UCX transports reach each peer
 * (shared memory inside a node, tcp across), parsed from ucp_ep_print_info's
 * "lane[i]:  n:tl/dev md[m] ..." lines, and which protocol a tag send of a
 * given size takes (its "tag_send: 0..<egr/short>..N..<egr/bcopy>..M..<rndv>
 * ..(inf)" line).
 */
#define _GNU_SOURCE
#include "transport/ucx_report.h"

#include "common/log.h"

#include <stdint.h>
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

/* What ucp_ep_print_info says about ep (malloc'ed, caller frees), or NULL. */
static char *ep_info_text(ucp_ep_h ep)
{
    char  *text = NULL;
    size_t size = 0;
    FILE  *mem  = open_memstream(&text, &size);

    if (mem == NULL) {
        return NULL;
    }
    ucp_ep_print_info(ep, mem);
    fclose(mem);
    return text;
}

void nsp_ucx_ep_lanes(ucp_ep_h ep, char *buf, size_t len)
{
    char *text;

    if (len == 0) {
        return;
    }
    buf[0] = '\0';
    text   = ep_info_text(ep);
    for (char *line = text, *next; line != NULL && *line != '\0'; line = next) {
        next = strchr(line, '\n');
        if (next != NULL) {
            *next++ = '\0';
        }
        lanes_parse_line(line, buf, len);
    }
    free(text);
    if (buf[0] == '\0') {
        snprintf(buf, len, "?");
    }
}

void nsp_ucx_ep_tag_protocols(ucp_ep_h ep, char *buf, size_t len)
{
    char       *text = ep_info_text(ep);
    const char *p    = text != NULL ? strstr(text, " tag_send: ") : NULL;

    if (len == 0) {
        return;
    }
    if (p == NULL) {
        snprintf(buf, len, "?");
    } else {
        p += strlen(" tag_send: ");
        snprintf(buf, len, "%.*s", (int)strcspn(p, "\n"), p);
    }
    free(text);
}

size_t nsp_ucx_rndv_thresh_of(const char *map)
{
    const char *rndv = strstr(map, "..<rndv>");
    const char *num;

    if (rndv == NULL) {
        return SIZE_MAX;
    }
    for (num = rndv; num > map && num[-1] >= '0' && num[-1] <= '9'; --num) {
    }
    return num < rndv ? (size_t)strtoull(num, NULL, 10) : 0;
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
