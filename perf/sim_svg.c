/* SVG picture of one batch for perf/nsp_sim; see sim_svg.h. */
#include "sim_svg.h"
#include "svg.h"
#include "common/log.h"
#include "planner/plan_internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Geometry, pixels. */
#define SVG_WIDTH     1200.0
#define SVG_LEFT      80.0
#define SVG_RIGHT     20.0
#define SVG_TOP       110.0
#define SVG_PANEL_H   180.0   /* plot height of one panel */
#define SVG_PANEL_GAP 62.0    /* title above + axis labels below */
#define SVG_MAX_LEVELS 24

static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b",
                                      "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#393b79",
                                      "#637939", "#8c6d31"};
#define NPALETTE (sizeof(palette) / sizeof(palette[0]))

/* Per-rank seconds per step of one plan, by level: [ranks * nlevels]. */
typedef struct panel {
    const nsp_plan_t *plan;
    double           *comp;     /* compute (incl. MoE term), L x sum over rounds */
    double           *comm;     /* all-to-all, L x sum over rounds */
    double           *rank_s;   /* modelled rank time after overlap */
    double            top;      /* tallest thing to draw, seconds */
} panel_t;

static int levels_for(int ranks)
{
    int n = 1;

    while ((1 << n) <= ranks && n < SVG_MAX_LEVELS) {
        ++n;
    }
    return n;
}

/* Accumulate a plan's per-level detail over its rounds. */
static nsp_status_t panel_fill(panel_t *p, const nsp_plan_t *plan, int nl)
{
    const int              ranks = plan->cluster.ranks;
    const double           L = plan->model.layers;
    nsp_cost_t             cost;
    nsp_rank_round_cost_t *rc = malloc(sizeof(*rc) * (size_t)ranks);
    double                *lc = malloc(sizeof(double) * (size_t)ranks * (size_t)nl);
    double                *lm = malloc(sizeof(double) * (size_t)ranks * (size_t)nl);
    nsp_status_t           status = NSP_OK;
    double                 round_s;

    p->plan = plan;
    p->comp = calloc((size_t)ranks * (size_t)nl, sizeof(double));
    p->comm = calloc((size_t)ranks * (size_t)nl, sizeof(double));
    p->rank_s = calloc((size_t)ranks, sizeof(double));
    p->top = plan->predicted.step_s;
    if (rc == NULL || lc == NULL || lm == NULL || p->comp == NULL || p->comm == NULL ||
        p->rank_s == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "cannot allocate the SVG data of %d ranks", ranks);
        goto out_free;
    }
    NSP_CHECK_GOTO(nsp_cost_init(&cost, &plan->model, &plan->cluster), status, out_free);
    for (int r = 0; r < plan->nrounds; ++r) {
        NSP_CHECK_GOTO(nsp_plan_eval_round(&cost, plan, r, rc, &round_s, nl, lc, lm), status,
                       out_free);
        for (size_t i = 0; i < (size_t)ranks * (size_t)nl; ++i) {
            p->comp[i] += L * lc[i];
            p->comm[i] += L * lm[i];
        }
        for (int g = 0; g < ranks; ++g) {
            p->rank_s[g] += L * rc[g].time_s;
        }
    }
    for (int g = 0; g < ranks; ++g) {
        double stack = 0.0;
        for (int l = 0; l < nl; ++l) {
            stack += p->comp[(size_t)g * nl + l] + p->comm[(size_t)g * nl + l];
        }
        p->top = fmax(p->top, fmax(stack, p->rank_s[g]));
    }

out_free:
    free(rc);
    free(lc);
    free(lm);
    return status;
}

static void panel_free(panel_t *p)
{
    free(p->comp);
    free(p->comm);
    free(p->rank_s);
}

static void xml_text(FILE *f, const char *s)
{
    for (; *s != '\0'; ++s) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* One stacked segment (level l, compute or comm) for every rank, drawn as
 * runs of ranks whose bars coincide on screen. base[] advances. */
static void draw_segment(FILE *f, const svg_frame_t *fr, const double *values, int nl, int l,
                         double *base, const char *color)
{
    int g = 0;

    while (g < fr->ranks) {
        double h = values[(size_t)g * nl + l], b = base[g];
        int    end = g + 1;
        if (h <= 0.0) {
            ++g;
            continue;
        }
        while (end < fr->ranks &&
               fabs(values[(size_t)end * nl + l] - h) * fr->h / fr->ymax < 0.05 &&
               fabs(base[end] - b) * fr->h / fr->ymax < 0.05) {
            ++end;
        }
        fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"/>\n",
                svg_x(fr, g), svg_y(fr, b + h), svg_x(fr, end) - svg_x(fr, g),
                svg_y(fr, b) - svg_y(fr, b + h), color);
        g = end;
    }
    for (g = 0; g < fr->ranks; ++g) {
        base[g] += values[(size_t)g * nl + l];
    }
}

static void draw_axes(FILE *f, const svg_frame_t *fr, int ranks_per_node)
{
    int label_every = ranks_per_node > 0 ? ranks_per_node : 1;

    svg_yticks(f, fr, 1.0, "s", 6);
    while (fr->ranks / label_every > 16) {
        label_every *= 2;
    }
    for (int r = 0; r <= fr->ranks; r += label_every) {
        fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"10\">%d</text>\n",
                svg_x(fr, r), fr->y0 + fr->h + 13, r);
    }
    svg_outline(f, fr);
}

/* Node boundaries over the bars (thin white), up to 32 nodes (more would hide the bars). */
static void draw_node_lines(FILE *f, const svg_frame_t *fr, int ranks_per_node)
{
    int nodes = fr->ranks / (ranks_per_node > 0 ? ranks_per_node : 1);

    if (nodes < 2 || nodes > 32) {
        return;
    }
    for (int n = 1; n < nodes; ++n) {
        double x = svg_x(fr, n * ranks_per_node);
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#fff\" "
                "stroke-width=\"0.8\"/>\n", x, fr->y0, x, fr->y0 + fr->h);
    }
}

/* The rank time after overlap as a step line over the ranks. */
static void draw_rank_line(FILE *f, const svg_frame_t *fr, const double *rank_s)
{
    fprintf(f, "<path fill=\"none\" stroke=\"#000\" stroke-width=\"1\" d=\"M%.2f %.2f",
            svg_x(fr, 0), svg_y(fr, rank_s[0]));
    for (int g = 0; g < fr->ranks; ++g) {
        if (g > 0 && fabs(rank_s[g] - rank_s[g - 1]) * fr->h / fr->ymax >= 0.05) {
            fprintf(f, "V%.2f", svg_y(fr, rank_s[g]));
        }
        if (g + 1 == fr->ranks ||
            fabs(rank_s[g + 1] - rank_s[g]) * fr->h / fr->ymax >= 0.05) {
            fprintf(f, "H%.2f", svg_x(fr, g + 1));
        }
    }
    fputs("\"/>\n", f);
}

static void draw_panel(FILE *f, const panel_t *p, const svg_frame_t *fr, int nl, double lb)
{
    const nsp_plan_t *plan = p->plan;
    double           *base = calloc((size_t)fr->ranks, sizeof(double));
    char              light[8];

    if (base == NULL) {
        return;
    }
    fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" font-size=\"13\" font-weight=\"bold\">", fr->x0,
            fr->y0 - 8);
    xml_text(f, plan->planner);
    fprintf(f, "</text><text x=\"%.2f\" y=\"%.2f\" font-size=\"12\">step %.4g s = %.3fx the "
            "lower bound, %d round%s, planned in %.3g ms%s%s</text>\n", fr->x0 + 80, fr->y0 - 8,
            plan->predicted.step_s, lb > 0 ? plan->predicted.step_s / lb : 0.0, plan->nrounds,
            plan->nrounds == 1 ? "" : "s", plan->predicted.plan_ms,
            (plan->flags & NSP_PLAN_FLAG_GREEDY_FALLBACK) ? ", greedy fallback" : "",
            (plan->flags & NSP_PLAN_FLAG_SOLVER_TIMEOUT) ? ", solver time limit hit" : "");
    draw_axes(f, fr, plan->cluster.ranks_per_node);
    /* crispEdges: no anti-aliased seams between adjacent bars. */
    fputs("<g shape-rendering=\"crispEdges\">\n", f);
    for (int l = 0; l < nl; ++l) {
        const char *color = palette[(size_t)l % NPALETTE];
        svg_lighten(color, SVG_LIGHT, light);
        draw_segment(f, fr, p->comp, nl, l, base, color);
        draw_segment(f, fr, p->comm, nl, l, base, light);
    }
    fputs("</g>\n", f);
    draw_node_lines(f, fr, plan->cluster.ranks_per_node);
    draw_rank_line(f, fr, p->rank_s);
    fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#b00\" "
            "stroke-width=\"1.5\"/>\n", fr->x0, svg_y(fr, plan->predicted.step_s),
            fr->x0 + fr->w, svg_y(fr, plan->predicted.step_s));
    fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#000\" "
            "stroke-width=\"1.5\" stroke-dasharray=\"7,4\"/>\n", fr->x0, svg_y(fr, lb),
            fr->x0 + fr->w, svg_y(fr, lb));
    free(base);
}

/* Legend: one swatch pair per level used, then the lines. */
static void draw_legend(FILE *f, const int *used, int nl)
{
    double x = SVG_LEFT, y = 66;

    for (int l = 0; l < nl; ++l) {
        if (!used[l]) {
            continue;
        }
        if (x > SVG_WIDTH - 170) {
            x = SVG_LEFT;
            y += 18;
        }
        svg_swatch_pair(f, x, y, palette[(size_t)l % NPALETTE], 1 << l, "a2a");
        x += 150;
    }
    x = SVG_LEFT;
    y += 20;
    fprintf(f, "<path d=\"M%.1f %.1fh24\" stroke=\"#000\"/><text x=\"%.1f\" y=\"%.1f\" "
            "font-size=\"11\">rank time after overlap</text>\n", x, y - 4, x + 30, y);
    fprintf(f, "<path d=\"M%.1f %.1fh24\" stroke=\"#b00\" stroke-width=\"1.5\"/><text x=\"%.1f\" "
            "y=\"%.1f\" font-size=\"11\">step time (slowest rank per round)</text>\n", x + 190,
            y - 4, x + 220, y);
    fprintf(f, "<path d=\"M%.1f %.1fh24\" stroke=\"#000\" stroke-width=\"1.5\" "
            "stroke-dasharray=\"7,4\"/><text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">lower "
            "bound</text>\n", x + 450, y - 4, x + 480, y);
}

nsp_status_t nsp_sim_svg_write(const char *path, nsp_plan_t *const *plans, int nplans,
                               double lower_bound_s, const char *caption)
{
    panel_t     *panels;
    int          nl, used[SVG_MAX_LEVELS] = {0};
    double       ymax = lower_bound_s, height, top;
    FILE        *f;
    nsp_status_t status = NSP_OK;

    if (path == NULL || plans == NULL || nplans < 1) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_sim_svg_write: nothing to draw");
    }
    nl = levels_for(plans[0]->cluster.ranks);
    panels = calloc((size_t)nplans, sizeof(*panels));
    if (panels == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "cannot allocate %d SVG panels", nplans);
    }
    for (int i = 0; i < nplans && status == NSP_OK; ++i) {
        status = panel_fill(&panels[i], plans[i], nl);
        if (status == NSP_OK) {
            ymax = fmax(ymax, panels[i].top);
            for (size_t k = 0; k < (size_t)plans[i]->cluster.ranks * (size_t)nl; ++k) {
                used[k % (size_t)nl] |= panels[i].comp[k] > 0 || panels[i].comm[k] > 0;
            }
        }
    }
    if (status != NSP_OK) {
        goto out_free;
    }
    ymax = ymax > 0 ? ymax * 1.06 : 1.0;
    top = SVG_TOP + 20.0 * (nl > 7);
    height = top + nplans * (SVG_PANEL_H + SVG_PANEL_GAP) + 10;
    f = fopen(path, "w");
    if (f == NULL) {
        status = nsp_error(NSP_ERR_IO, "cannot write %s: %s", path, strerror(errno));
        goto out_free;
    }
    svg_begin(f, SVG_WIDTH, height);
    fprintf(f, "<text x=\"%.1f\" y=\"24\" font-size=\"16\" font-weight=\"bold\">Per-rank time of "
            "one step, stacked by tree level (seconds)</text>\n<text x=\"%.1f\" y=\"44\" "
            "font-size=\"12\" fill=\"#444\">", SVG_LEFT, SVG_LEFT);
    xml_text(f, caption != NULL ? caption : "");
    fputs("</text>\n", f);
    draw_legend(f, used, nl);
    for (int i = 0; i < nplans; ++i) {
        svg_frame_t fr = {SVG_LEFT, top + SVG_PANEL_GAP - 24 + i * (SVG_PANEL_H + SVG_PANEL_GAP),
                          SVG_WIDTH - SVG_LEFT - SVG_RIGHT, SVG_PANEL_H, ymax,
                          plans[i]->cluster.ranks};
        draw_panel(f, &panels[i], &fr, nl, lower_bound_s);
    }
    fputs("</svg>\n", f);
    if (ferror(f) | (fclose(f) != 0)) {
        status = nsp_error(NSP_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    }

out_free:
    for (int i = 0; i < nplans; ++i) {
        panel_free(&panels[i]);
    }
    free(panels);
    return status;
}
