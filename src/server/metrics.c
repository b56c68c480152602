/* GET /metrics: the Prometheus text format (version 0.0.4), from the
 * batcher's counters and the server's own. */
#include <stdio.h>
#include <stdlib.h>

#include "server/server.h"

char *srv_metrics_text(srv *s) {
    tnd_batcher_stats b = {0};
    pthread_mutex_lock(&s->bmu);
    if (s->b) tnd_batcher_stats_get(s->b, &b);
    pthread_mutex_unlock(&s->bmu);
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f) return NULL;
#define M(name, type, help) fprintf(f, "# HELP tandem_" name " " help "\n# TYPE tandem_" name " " type "\n")
    M("up", "gauge", "0 loading the model, 1 ready, 2 shutting down");
    fprintf(f, "tandem_up %d\n", atomic_load(&s->state));
    M("http_responses_total", "counter", "HTTP responses by status class");
    for (int i = 1; i <= 5; i++)
        fprintf(f, "tandem_http_responses_total{code=\"%dxx\"} %llu\n", i,
                (unsigned long long)atomic_load(&s->n_http[i]));
    M("requests_total", "counter", "generation requests that ended, by outcome");
    fprintf(f, "tandem_requests_total{outcome=\"ok\"} %llu\n", (unsigned long long)atomic_load(&s->n_req_ok));
    fprintf(f, "tandem_requests_total{outcome=\"cancelled\"} %llu\n",
            (unsigned long long)atomic_load(&s->n_req_cancelled));
    fprintf(f, "tandem_requests_total{outcome=\"error\"} %llu\n", (unsigned long long)atomic_load(&s->n_req_error));
    M("requests_rejected_total", "counter", "requests refused because the queue was full (503)");
    fprintf(f, "tandem_requests_rejected_total %llu\n", (unsigned long long)atomic_load(&s->n_rejected_full));
    M("finish_total", "counter", "ended requests by finish reason");
    static const char *why[] = {"length", "eog", "stop", "cancel", "error"};
    for (int i = 0; i < 5; i++)
        fprintf(f, "tandem_finish_total{reason=\"%s\"} %llu\n", why[i], (unsigned long long)atomic_load(&s->n_finish[i]));
    M("prompt_tokens_total", "counter", "prompt tokens evaluated");
    fprintf(f, "tandem_prompt_tokens_total %llu\n", (unsigned long long)b.n_prompt_tokens);
    M("prompt_tokens_reused_total", "counter", "prompt tokens not evaluated: a finished request's slot held them");
    fprintf(f, "tandem_prompt_tokens_reused_total %llu\n", (unsigned long long)b.n_prompt_reused);
    M("generation_tokens_total", "counter", "tokens generated");
    fprintf(f, "tandem_generation_tokens_total %llu\n", (unsigned long long)b.n_gen_tokens);
    M("rounds_total", "counter", "batched engine rounds");
    fprintf(f, "tandem_rounds_total %llu\n", (unsigned long long)b.n_rounds);
    M("queue_depth", "gauge", "requests waiting for a sequence slot");
    fprintf(f, "tandem_queue_depth %d\n", b.queued);
    M("queue_max", "gauge", "requests the queue holds before 503");
    fprintf(f, "tandem_queue_max %d\n", b.max_queue);
    M("requests_running", "gauge", "requests holding a sequence slot");
    fprintf(f, "tandem_requests_running %d\n", b.running);
    M("slots", "gauge", "sequence slots (--parallel)");
    fprintf(f, "tandem_slots %d\n", b.n_seq_max);
    M("kv_rows_used", "gauge", "KV cache rows held by running sequences");
    fprintf(f, "tandem_kv_rows_used %lld\n", (long long)b.kv_rows_used);
    M("kv_rows_total", "gauge", "KV cache rows of all slots");
    fprintf(f, "tandem_kv_rows_total %lld\n", (long long)b.kv_rows_total);
    M("kv_usage_ratio", "gauge", "kv_rows_used / kv_rows_total");
    fprintf(f, "tandem_kv_usage_ratio %g\n", b.kv_rows_total ? (double)b.kv_rows_used / (double)b.kv_rows_total : 0.0);
    M("decode_seconds_total", "counter", "seconds of rounds that generated tokens");
    fprintf(f, "tandem_decode_seconds_total %g\n", b.decode_s);
    M("time_per_output_token_seconds", "gauge",
      "mean seconds of a round that generated tokens: each running request's time per output token");
    fprintf(f, "tandem_time_per_output_token_seconds %g\n", b.n_gen_rounds ? b.decode_s / (double)b.n_gen_rounds : 0.0);
#undef M
    if (fclose(f)) {
        free(buf);
        return NULL;
    }
    return buf;
}
