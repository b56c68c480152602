/* The op list of a round: a growable array of nodes (graph.h). */
#include <stdlib.h>

#include "graph.h"
#include "util.h"

void tnd_graph_reset(tnd_graph *g) { g->n = 0; }

tnd_status tnd_graph_push(tnd_graph *g, const tnd_op *op, int sid, int layer, int pin) {
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 256;
        tnd_node *n = realloc(g->nodes, sizeof *n * (size_t)cap);
        if (!n) return tnd_fail(TND_ERR_NOMEM, "out of memory for the op list");
        g->nodes = n;
        g->cap = cap;
    }
    g->nodes[g->n++] = (tnd_node){.op = *op, .sid = sid, .layer = layer, .pin = pin};
    return TND_OK;
}

void tnd_graph_free(tnd_graph *g) {
    free(g->nodes);
    *g = (tnd_graph){0};
}
