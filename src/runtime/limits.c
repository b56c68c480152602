/* The bandwidths behind the physical limit that tandem bench reports each
 * result against (docs/ARCHITECTURE.md): measured on the machine, above
 * any context. */
#include <math.h>
#include <string.h>

#include "backend.h"
#include "cpu/membw.h"
#include "cpu/pool.h"
#include "runtime/runtime.h"
#include "util.h"

tnd_status tnd_measure_limits(int n_threads, tnd_limits *L) {
    memset(L, 0, sizeof *L);
    size_t n = (size_t)1 << 30;
    tnd_pool *pool = tnd_pool_new(n_threads);
    uint8_t *cbuf = tnd_aligned_alloc(2 * n);
    if (!pool || !cbuf) {
        tnd_pool_free(pool);
        tnd_aligned_free(cbuf);
        return tnd_fail(TND_ERR_NOMEM, "out of memory for the bandwidth buffers");
    }
    memset(cbuf, 1, 2 * n);
    L->cpu = tnd_cpu_read_bw(pool, cbuf, 2 * n, 2);
    tnd_backend *g = NULL;
    tnd_cuda_params cp = {0};
    void *h = NULL, *hd = NULL, *d = NULL;
    tnd_stream *st = NULL;
    tnd_event *e0 = NULL, *e1 = NULL;
    tnd_status rc = TND_ERR_BACKEND;
    if ((rc = tnd_backend_cuda_new(&cp, &g)) || (rc = tnd_backend_host_alloc(g, n, &h, &hd)) ||
        (rc = tnd_backend_buf_alloc(g, n, &d)) || (rc = tnd_backend_stream_new(g, &st)) ||
        (rc = tnd_backend_event_new(g, &e0)) || (rc = tnd_backend_event_new(g, &e1)))
        goto out;
    memset(h, 1, n);
    float ms;
    double best = 1e30;
    for (int r = 0; r < 3; r++) { /* pinned host -> device */
        tnd_backend_event_record(g, e0, st);
        tnd_backend_copy_h2d(g, d, h, n, st);
        tnd_backend_event_record(g, e1, st);
        tnd_backend_stream_sync(g, st);
        if (!tnd_backend_event_elapsed(g, e0, e1, &ms)) best = fmin(best, ms / 1e3);
    }
    L->pcie = n / best / 1e9;
    best = 1e30;
    for (int r = 0; r < 3; r++) { /* device -> device: reads and writes n/2 */
        tnd_backend_event_record(g, e0, st);
        tnd_backend_copy_d2d(g, (char *)d + n / 2, d, n / 2, st);
        tnd_backend_event_record(g, e1, st);
        tnd_backend_stream_sync(g, st);
        if (!tnd_backend_event_elapsed(g, e0, e1, &ms)) best = fmin(best, ms / 1e3);
    }
    L->hbm = (double)n / best / 1e9;
    /* both at once: four pinned copies queued, the CPU reading meanwhile for
     * as long as the copies take (from the rates alone), so both rates come
     * from the same window */
    int passes = (int)ceil((4.0 * n / (L->pcie * 1e9)) / (2.0 * n / (L->cpu * 1e9)));
    if (passes < 1) passes = 1;
    tnd_backend_event_record(g, e0, st);
    for (int r = 0; r < 4; r++) tnd_backend_copy_h2d(g, d, h, n, st);
    tnd_backend_event_record(g, e1, st);
    double t = 0;
    for (int r = 0; r < passes; r++) t += tnd_cpu_read_once(pool, cbuf, 2 * n);
    tnd_backend_stream_sync(g, st);
    if (!tnd_backend_event_elapsed(g, e0, e1, &ms)) L->both_pcie = 4.0 * n / (ms / 1e3) / 1e9;
    L->both_cpu = 2.0 * n * passes / t / 1e9;
    rc = TND_OK;
out:
    if (g) {
        tnd_backend_event_free(g, e0);
        tnd_backend_event_free(g, e1);
        tnd_backend_stream_free(g, st);
        if (d) tnd_backend_buf_free(g, d);
        if (h) tnd_backend_host_free(g, h);
        tnd_backend_free(g);
    }
    tnd_pool_free(pool);
    tnd_aligned_free(cbuf);
    return rc;
}

