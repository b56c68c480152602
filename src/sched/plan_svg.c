/* A placement drawn as an SVG grid: rows are layers (plus embedding/output
 * rows), columns tensor roles, color is the backend. Plain SVG 1.1 with no
 * scripts or external references, so any browser or viewer shows it. */
#include "sched/plan_svg.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

#define CELL_W 26
#define CELL_H 14
#define GAP 2
#define COLOR_GPU "#3b8a3e"
#define COLOR_CPU "#4a78c2"
#define COLOR_ABSENT "#f2f2f2"

/* Text content / attribute value with the five XML specials escaped. */
static void put_esc(FILE *f, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default:
            /* Control characters are not allowed in XML 1.0. */
            if ((unsigned char)*s >= 0x20 || *s == '\t' || *s == '\n')
                fputc(*s, f);
        }
    }
}

static void write_svg(FILE *f, const char *title, int n_rows, const char *const *row_labels, int n_roles,
                      const char *const *role_names, const float *cells) {
    size_t lab = 4, rol = 4;
    for (int r = 0; r < n_rows; r++)
        if (row_labels && row_labels[r])
            lab = TND_MAX(lab, strlen(row_labels[r]));
    for (int c = 0; c < n_roles; c++)
        if (role_names && role_names[c])
            rol = TND_MAX(rol, strlen(role_names[c]));
    /* ~7 px per character at font-size 11; role names are drawn at -60
     * degrees, so their height is about 0.87 of their length. */
    const int left = 10 + (int)lab * 7, top = 44 + (int)(rol * 7 * 0.87);
    const int grid_w = n_roles * (CELL_W + GAP), grid_h = n_rows * (CELL_H + GAP);
    const int legend_y = top + grid_h + 14;
    /* The last role name leans right by about half its length. */
    int width = TND_MAX(left + grid_w + 20 + (int)(rol * 7 / 2), 460);
    width = TND_MAX(width, 20 + (int)(title ? strlen(title) : 9) * 8);
    const int height = legend_y + 36;

    int n_gpu = 0, n_cpu = 0, n_mixed = 0;
    for (int i = 0; i < n_rows * n_roles; i++) {
        float v = cells[i];
        if (v < 0)
            continue;
        if (v >= 1.0f)
            n_gpu++;
        else if (v <= 0.0f)
            n_cpu++;
        else
            n_mixed++;
    }

    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"sans-serif\" font-size=\"11\">\n",
            width, height, width, height);
    fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"white\"/>\n", width, height);
    fputs("<text x=\"10\" y=\"18\" font-size=\"14\" font-weight=\"bold\">", f);
    put_esc(f, title ? title : "placement");
    fputs("</text>\n", f);
    fprintf(f, "<text x=\"10\" y=\"34\" fill=\"#555\">%d on GPU, %d on CPU, %d split (mixed)</text>\n", n_gpu, n_cpu,
            n_mixed);

    for (int c = 0; c < n_roles; c++) {
        int x = left + c * (CELL_W + GAP) + CELL_W / 2, y = top - 6;
        fprintf(f, "<text x=\"%d\" y=\"%d\" transform=\"rotate(-60 %d %d)\">", x, y, x, y);
        put_esc(f, role_names ? role_names[c] : "");
        fputs("</text>\n", f);
    }
    for (int r = 0; r < n_rows; r++) {
        int y = top + r * (CELL_H + GAP);
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">", left - 6, y + CELL_H - 3);
        put_esc(f, row_labels ? row_labels[r] : "");
        fputs("</text>\n", f);
        for (int c = 0; c < n_roles; c++) {
            int x = left + c * (CELL_W + GAP);
            float v = cells[(size_t)r * n_roles + c];
            const char *fill = v < 0 ? COLOR_ABSENT : v >= 1.0f ? COLOR_GPU : COLOR_CPU;
            fprintf(f, "<rect class=\"cell\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"%s><title>", x,
                    y, CELL_W, CELL_H, fill, v < 0 ? " stroke=\"#ddd\"" : "");
            put_esc(f, row_labels ? row_labels[r] : "");
            fputc(' ', f);
            put_esc(f, role_names ? role_names[c] : "");
            if (v < 0)
                fputs(": absent", f);
            else
                fprintf(f, ": %.0f%% GPU", v * 100.0);
            fputs("</title></rect>\n", f);
            if (v > 0 && v < 1.0f) /* mixed: GPU share filled from the left */
                fprintf(f,
                        "<rect class=\"frac\" x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\" "
                        "pointer-events=\"none\"/>\n",
                        x, y, v * CELL_W, CELL_H, COLOR_GPU);
        }
    }

    struct {
        const char *label, *fill;
        float frac;
    } leg[] = {{"GPU", COLOR_GPU, 1}, {"CPU", COLOR_CPU, 0}, {"split (GPU share filled)", COLOR_CPU, 0.4f},
               {"absent", COLOR_ABSENT, -1}};
    int x = 10;
    for (size_t k = 0; k < TND_ARRAY_LEN(leg); k++) {
        fprintf(f, "<rect class=\"legend\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"%s/>\n", x,
                legend_y, CELL_W, CELL_H, leg[k].fill, leg[k].frac < 0 ? " stroke=\"#ddd\"" : "");
        if (leg[k].frac > 0 && leg[k].frac < 1)
            fprintf(f, "<rect class=\"frac\" x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>\n", x,
                    legend_y, leg[k].frac * CELL_W, CELL_H, COLOR_GPU);
        fprintf(f, "<text x=\"%d\" y=\"%d\">%s</text>\n", x + CELL_W + 5, legend_y + CELL_H - 3, leg[k].label);
        x += CELL_W + 12 + (int)strlen(leg[k].label) * 7;
    }
    fputs("</svg>\n", f);
}

tnd_status tnd_plan_svg(const char *path, const char *title, int n_rows, const char *const *row_labels,
                        int n_roles, const char *const *role_names, const float *cells) {
    if (!path || n_rows < 0 || n_roles < 0 || (n_rows > 0 && n_roles > 0 && !cells))
        return tnd_fail(TND_ERR_ARG, "plan svg: bad arguments");
    if ((uint64_t)n_rows * (uint64_t)n_roles > (1u << 24))
        return tnd_fail(TND_ERR_ARG, "plan svg: %d x %d cells is too many", n_rows, n_roles);
    for (int i = 0; i < n_rows * n_roles; i++)
        if (isnan(cells[i]) || cells[i] > 1.0f)
            return tnd_fail(TND_ERR_ARG, "plan svg: cell %d = %g is not a GPU fraction in [0,1] or -1", i,
                            (double)cells[i]);
    char tmp[4096];
    int k = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if (k < 0 || (size_t)k >= sizeof tmp)
        return tnd_fail(TND_ERR_ARG, "plan svg: path too long");
    FILE *f = fopen(tmp, "w");
    if (!f)
        return tnd_fail(TND_ERR_IO, "%s: %s", tmp, strerror(errno));
    write_svg(f, title, n_rows, row_labels, n_roles, role_names, cells);
    bool bad = ferror(f) != 0;
    int err = errno;
    if (fclose(f) != 0 && !bad) {
        bad = true;
        err = errno;
    }
    if (bad) {
        unlink(tmp);
        return tnd_fail(TND_ERR_IO, "%s: write failed: %s", tmp, strerror(err));
    }
    if (rename(tmp, path) != 0) {
        err = errno;
        unlink(tmp);
        return tnd_fail(TND_ERR_IO, "%s: rename failed: %s", path, strerror(err));
    }
    return TND_OK;
}
