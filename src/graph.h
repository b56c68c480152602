/* The op list of a round at slice granularity (docs/ARCHITECTURE.md: The
 * path of a request, Slices).
 *
 * The forward recipe (model/forward.c) appends one node per op; the executor
 * (exec/) then decides each node's backend from the placement and runs the
 * list across the CPU and the GPU. Tensors in a node's op are *canonical*
 * pointers: the host-side activation buffers, the mmapped weights, the
 * canonical KV reservation. The executor rebases them into the memory of the
 * backend that runs the node. */
#ifndef TND_GRAPH_H
#define TND_GRAPH_H

#include "backend.h"

typedef struct tnd_node {
    tnd_op op;
    int sid;      /* weight slice read as in[0] (tnd_model.slices id), -1: none */
    int layer;    /* layer index, -1 outside the layers */
    int pin;      /* -1: runs where the previous node ran (weightless ops);
                     -2: runs where the layer's attention and KV cache live */
} tnd_node;

enum { TND_PIN_FOLLOW = -1, TND_PIN_KV = -2 };

typedef struct tnd_graph {
    tnd_node *nodes;
    int n, cap;
} tnd_graph;

/* Empties g, keeping its memory. */
void tnd_graph_reset(tnd_graph *g);
/* Appends a node; TND_ERR_NOMEM if it cannot grow. */
tnd_status tnd_graph_push(tnd_graph *g, const tnd_op *op, int sid, int layer, int pin);
void tnd_graph_free(tnd_graph *g);

#endif
