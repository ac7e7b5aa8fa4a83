/*
 * Small SVG helpers shared by perf/nsp_sim's picture (perf/sim_svg.c) and
 * the demo's (tools/demo/demo_svg.c): a plot frame mapping (rank, value) to
 * pixels, the document header, axis ticks, colours and legend swatches.
 */
#ifndef NSP_PERF_SVG_H_
#define NSP_PERF_SVG_H_

#include <stdio.h>

/* Lightening of a level's colour for its exchange (compute keeps the colour). */
#define SVG_LIGHT 0.55

/** A plot box of `ranks` bars: x0, y0 its top left corner, w x h pixels,
 *  ymax the value at its top (the bottom is 0). */
typedef struct svg_frame {
    double x0, y0, w, h, ymax;
    int    ranks;
} svg_frame_t;

/** Pixel x of the left edge of rank bar `rank` (fractional ranks interpolate). */
double svg_x(const svg_frame_t *fr, double rank);

/** Pixel y of `value` (0 at the bottom of the box, ymax at the top). */
double svg_y(const svg_frame_t *fr, double value);

/** The SVG document's opening (width x height pixels) on a white background. */
void svg_begin(FILE *f, double width, double height);

/** A colour `hex` ("#rrggbb") mixed with white: t = 0 keeps it, 1 gives white. */
void svg_lighten(const char *hex, double t, char out[8]);

/** A tick step of 1, 2 or 5 x 10^k giving at most 6 ticks up to `top`. */
double svg_tick_step(double top);

/** Grey grid lines every svg_tick_step(ymax), labelled "<value * scale> <unit>"
 *  right-aligned `label_dx` pixels left of the box. */
void svg_yticks(FILE *f, const svg_frame_t *fr, double scale, const char *unit,
                double label_dx);

/** The box's grey outline. */
void svg_outline(FILE *f, const svg_frame_t *fr);

/** A legend entry of a level of degree `degree`: `color` (compute) and its
 *  lightened exchange colour side by side, then "d=<degree> compute | <comm>". */
void svg_swatch_pair(FILE *f, double x, double y, const char *color, int degree,
                     const char *comm);

#endif /* NSP_PERF_SVG_H_ */
