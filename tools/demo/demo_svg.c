/*
 * The demo's picture (see demo.h): for one batch, one row per (transport,
 * planner) and two panels side by side on one time axis --
 *   left:  the cost model: per rank, compute (dark) and all-to-all (light)
 *          stacked by the degree of the level, the rank's time after
 *          overlap as a black line, the predicted step in red;
 *   right: measured (levels pipelined): per rank, kernel
 *          thread CPU stacked by degree in the same colours, then the rest
 *          of the rank's process CPU (exchanges, packing, driver) in grey;
 *          crit (sum over calls of the busiest rank) in red; the wall time
 *          on this machine is written in the title.
 * Style follows perf/sim_svg.c (which draws predictions for many ranks).
 */
#include "demo.h"

#include "common/log.h"
#include "svg.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SVG_W        1280.0
#define SVG_LEFT     70.0
#define SVG_GAP      50.0     /* between the two panels of a row */
#define SVG_TOP      118.0
#define SVG_PANEL_H  190.0
#define SVG_ROW_GAP  64.0

static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b",
                                      "#e377c2", "#17becf", "#bcbd22", "#393b79", "#637939"};
#define NPALETTE (sizeof(palette) / sizeof(palette[0]))
#define REST_COLOR "#b0b0b0"

static void rect(FILE *f, const svg_frame_t *b, int rank, double lo, double hi,
                 const char *color)
{
    if (hi - lo <= 0) {
        return;
    }
    fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"/>\n",
            svg_x(b, rank) + 1, svg_y(b, hi), svg_x(b, rank + 1) - svg_x(b, rank) - 2,
            svg_y(b, lo) - svg_y(b, hi), color);
}

static void hline(FILE *f, const svg_frame_t *b, double s, const char *color, const char *dash)
{
    fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" "
            "stroke-width=\"1.5\"%s/>\n", b->x0, svg_y(b, s), b->x0 + b->w, svg_y(b, s), color,
            dash);
}

static void axes(FILE *f, const svg_frame_t *b, const char *title)
{
    svg_yticks(f, b, 1e3, "ms", 5);
    for (int r = 0; r < b->ranks; ++r) {
        if (b->ranks <= 16 || r % (b->ranks / 16) == 0) {
            fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"10\">%d"
                    "</text>\n", 0.5 * (svg_x(b, r) + svg_x(b, r + 1)), b->y0 + b->h + 13, r);
        }
    }
    svg_outline(f, b);
    fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" font-size=\"12\">%s</text>\n", b->x0, b->y0 - 7,
            title);
}

static void draw_pred(FILE *f, const demo_t *demo, const demo_pred_t *p,
                      const svg_frame_t *b)
{
    char light[8], title[256];

    snprintf(title, sizeof(title), "<tspan font-weight=\"bold\">predicted</tspan>: step %.1f ms "
             "(slowest rank per round), compute max/mean %.3f", 1e3 * p->step_s,
             p->comp_mean_s > 0 ? p->comp_max_s / p->comp_mean_s : 0.0);
    axes(f, b, title);
    fputs("<g shape-rendering=\"crispEdges\">\n", f);
    for (int r = 0; r < b->ranks; ++r) {
        double base = 0;
        for (int k = 0; k < demo->ndegrees; ++k) {
            const char *color = palette[(size_t)k % NPALETTE];
            svg_lighten(color, SVG_LIGHT, light);
            rect(f, b, r, base, base + p->rank_deg_comp[r][k], color);
            base += p->rank_deg_comp[r][k];
            rect(f, b, r, base, base + p->rank_deg_comm[r][k], light);
            base += p->rank_deg_comm[r][k];
        }
    }
    fputs("</g>\n", f);
    for (int r = 0; r < b->ranks; ++r) {
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#000\"/>\n",
                svg_x(b, r), svg_y(b, p->rank_s[r]), svg_x(b, r + 1), svg_y(b, p->rank_s[r]));
    }
    hline(f, b, p->step_s, "#b00", "");
}

static void draw_meas(FILE *f, const demo_t *demo, int session, const demo_stat_t *st,
                      const svg_frame_t *b)
{
    char title[256];

    snprintf(title, sizeof(title), "<tspan font-weight=\"bold\">measured</tspan> (pipelined): "
             "crit %.1f ms, compute max/mean %.3f; wall %.0f ms (%.2f cores)", 1e3 * st->crit_s,
             st->comp_mean_s > 0 ? st->comp_max_s / st->comp_mean_s : 0.0, 1e3 * st->wall_s,
             st->wall_s > 0 ? st->cpu_s / st->wall_s : 0.0);
    (void)demo;
    (void)session;
    axes(f, b, title);
    fputs("<g shape-rendering=\"crispEdges\">\n", f);
    for (int r = 0; r < b->ranks; ++r) {
        double base = 0;
        for (int k = 0; k < demo->ndegrees; ++k) {
            rect(f, b, r, base, base + st->rank_deg_kernel[r][k], palette[(size_t)k % NPALETTE]);
            base += st->rank_deg_kernel[r][k];
        }
        rect(f, b, r, base, fmax(base, st->rank_busy[r]), REST_COLOR);
    }
    fputs("</g>\n", f);
    hline(f, b, st->crit_s, "#b00", "");
}

static void legend(FILE *f, const demo_t *demo)
{
    double x = SVG_LEFT, y = 72;

    for (int k = 0; k < demo->ndegrees; ++k) {
        svg_swatch_pair(f, x, y, palette[(size_t)k % NPALETTE], demo->degrees[k], "all-to-all");
        x += 170;
    }
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/><text "
            "x=\"%.1f\" y=\"%.1f\" font-size=\"11\">measured: rest of the rank's CPU (exchanges, "
            "packing, driver)</text>\n", x, y - 10, REST_COLOR, x + 16, y);
    y += 20;
    x = SVG_LEFT;
    fprintf(f, "<path d=\"M%.1f %.1fh24\" stroke=\"#000\"/><text x=\"%.1f\" y=\"%.1f\" "
            "font-size=\"11\">predicted rank time after overlap</text>\n", x, y - 4, x + 30, y);
    fprintf(f, "<path d=\"M%.1f %.1fh24\" stroke=\"#b00\" stroke-width=\"1.5\"/><text x=\"%.1f\" "
            "y=\"%.1f\" font-size=\"11\">step: predicted (left), crit = sum over calls of the "
            "busiest rank's CPU (right)</text>\n", x + 240, y - 4, x + 270, y);
}

nsp_status_t demo_write_svg(const demo_t *demo, const char *path, int batch)
{
    const int    N = demo->cfg.ranks, rows = demo->nsessions * DEMO_NPLANNERS;
    demo_pred_t *pred = calloc((size_t)rows, sizeof(*pred));
    demo_stat_t *st = calloc((size_t)rows, sizeof(*st));
    double       ymax = 0, pw = (SVG_W - SVG_LEFT - SVG_GAP - 20) / 2, height;
    int64_t      longest = 0;
    FILE        *f = NULL;
    nsp_status_t status = NSP_OK;

    if (pred == NULL || st == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "out of memory");
        goto out;
    }
    /* row i: session i / DEMO_NPLANNERS, planner i % DEMO_NPLANNERS; one time axis */
    for (int i = 0; i < rows; ++i) {
        int s = i / DEMO_NPLANNERS, p = i % DEMO_NPLANNERS;
        NSP_CHECK_GOTO(demo_predict(demo, s, batch, p, &pred[i]), status, out);
        demo_stat(demo, s, batch, p, DEMO_PIPELINED, &st[i]);
        ymax = fmax(ymax, fmax(pred[i].step_s, st[i].crit_s));
        for (int r = 0; r < N; ++r) {
            ymax = fmax(ymax, fmax(pred[i].rank_comp[r] + pred[i].rank_comm[r],
                                   fmax(st[i].rank_busy[r], st[i].rank_kernel[r])));
        }
    }
    ymax = ymax > 0 ? 1.06 * ymax : 1.0;
    for (int i = 0; i < demo->nseqs[batch]; ++i) {
        longest = demo->lens[batch][i] > longest ? demo->lens[batch][i] : longest;
    }
    height = SVG_TOP + rows * (SVG_PANEL_H + SVG_ROW_GAP);
    f = fopen(path, "w");
    if (f == NULL) {
        status = nsp_error(NSP_ERR_IO, "cannot write %s: %s (--svg)", path, strerror(errno));
        goto out;
    }
    svg_begin(f, SVG_W, height);
    {
        char label[160];
        demo_compute_label(demo, label, sizeof(label));
        fprintf(f, "<text x=\"%.1f\" y=\"24\" font-size=\"16\" font-weight=\"bold\">nsp_demo: "
                "per-rank time of one step (one attention layer fwd + bwd), stacked by level "
                "degree; %s</text>\n", SVG_LEFT, label);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"44\" font-size=\"12\" fill=\"#444\">batch %d: %d sequences, "
            "%lld tokens (longest %lld) of %s / %d; %d ranks; heads %d/%d x %d; cost model with "
            "rates calibrated on this machine</text>\n", SVG_LEFT, batch, demo->nseqs[batch],
            (long long)demo->offsets[batch][demo->nseqs[batch]], (long long)longest,
            strrchr(demo->cfg.workload, '/') != NULL ? strrchr(demo->cfg.workload, '/') + 1
                                                     : demo->cfg.workload,
            demo->cfg.scale, N, demo->cfg.q_heads, demo->cfg.kv_heads,
            demo->cfg.head_dim);
    legend(f, demo);
    for (int i = 0; i < rows; ++i) {
        int    s = i / DEMO_NPLANNERS, p = i % DEMO_NPLANNERS;
        double y0 = SVG_TOP + SVG_ROW_GAP - 20 + i * (SVG_PANEL_H + SVG_ROW_GAP);
        svg_frame_t left = {SVG_LEFT, y0, pw, SVG_PANEL_H, ymax, N};
        svg_frame_t right = {SVG_LEFT + pw + SVG_GAP, y0, pw, SVG_PANEL_H, ymax, N};
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"14\" font-weight=\"bold\">%s over "
                "UCX %s (%d round%s)</text>\n", SVG_LEFT, y0 - 24, demo_planner_names[p],
                demo->session_name[s], demo->plans[s][batch][p]->nrounds,
                demo->plans[s][batch][p]->nrounds == 1 ? "" : "s");
        draw_pred(f, demo, &pred[i], &left);
        draw_meas(f, demo, s, &st[i], &right);
    }
    fputs("</svg>\n", f);
    if (ferror(f)) {
        status = nsp_error(NSP_ERR_IO, "cannot write %s", path);
    }
out:
    if (f != NULL && fclose(f) != 0 && status == NSP_OK) {
        status = nsp_error(NSP_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    }
    free(pred);
    free(st);
    return status;
}
