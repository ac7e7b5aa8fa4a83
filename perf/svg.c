/* Small SVG helpers shared by perf/nsp_sim and the demo (see svg.h). */
#include "svg.h"

#include <math.h>

double svg_x(const svg_frame_t *fr, double rank)
{
    return fr->x0 + fr->w * rank / fr->ranks;
}

double svg_y(const svg_frame_t *fr, double value)
{
    return fr->y0 + fr->h - fr->h * value / fr->ymax;
}

void svg_begin(FILE *f, double width, double height)
{
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/"
            "svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" font-family=\""
            "sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n", width,
            height, width, height);
}

void svg_lighten(const char *hex, double t, char out[8])
{
    unsigned r, g, b;

    sscanf(hex + 1, "%2x%2x%2x", &r, &g, &b);
    r = (unsigned)(r + (255 - r) * t + 0.5);
    g = (unsigned)(g + (255 - g) * t + 0.5);
    b = (unsigned)(b + (255 - b) * t + 0.5);
    snprintf(out, 8, "#%02x%02x%02x", r & 0xff, g & 0xff, b & 0xff);
}

double svg_tick_step(double top)
{
    double raw = top / 5.0, mag = pow(10.0, floor(log10(raw)));

    if (raw <= mag) {
        return mag;
    }
    if (raw <= 2 * mag) {
        return 2 * mag;
    }
    if (raw <= 5 * mag) {
        return 5 * mag;
    }
    return 10 * mag;
}

void svg_yticks(FILE *f, const svg_frame_t *fr, double scale, const char *unit, double label_dx)
{
    double step = svg_tick_step(fr->ymax);

    for (double t = 0.0; t <= fr->ymax * 1.0001; t += step) {
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#ddd\"/>\n",
                fr->x0, svg_y(fr, t), fr->x0 + fr->w, svg_y(fr, t));
        fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\" font-size=\"11\">%g %s"
                "</text>\n", fr->x0 - label_dx, svg_y(fr, t) + 4, scale * t, unit);
    }
}

void svg_outline(FILE *f, const svg_frame_t *fr)
{
    fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"none\" "
            "stroke=\"#888\"/>\n", fr->x0, fr->y0, fr->w, fr->h);
}

void svg_swatch_pair(FILE *f, double x, double y, const char *color, int degree,
                     const char *comm)
{
    char light[8];

    svg_lighten(color, SVG_LIGHT, light);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>"
            "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>"
            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">d=%d compute | %s</text>\n",
            x, y - 10, color, x + 13, y - 10, light, x + 29, y, degree, comm);
}
