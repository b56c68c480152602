/* A load injector for the load-variation studies (ATSInfer §5.3, Fig. 13;
 * scripts/device-load.sh): CPU spinners, a GPU SM hog and a PCIe copier,
 * switched on and off by a schedule of phases.
 *
 *   build/dev_stress --phase SECONDS:LOAD [--phase ...] [--gpu-ms MS]
 *   build/dev_stress [--cpu N] [--gpu-sm FRACTION] [--pcie MIB] --for SECONDS
 *
 * LOAD is `none` or a comma list of
 *   cpu=N       N threads that busy-loop, not pinned (as `sh -c 'while :; do
 *               :; done'` processes would: the OS places them among the
 *               engine's threads)
 *   gpu=F       a kernel that spins --gpu-ms (default 2) per launch on a
 *               fraction F (0 < F <= 1) of the SMs, one block per SM, launched
 *               again as soon as it ends
 *   pcie=MIB    MIB-sized pinned host blocks copied to the GPU in a loop
 *               (cudaMemcpyAsync on a stream of its own)
 * GPU and PCIe loads need a CUDA build (dev/stress_gpu.cu); without one
 * asking for them is an error before anything starts.
 *
 * Stdout (flushed per line), for the plot to shade the phases:
 *   # comment lines (the machine; per phase what the load achieved)
 *   clock_s  t_s  phase  load      (TSV header)
 *   one line as each phase starts: CLOCK_MONOTONIC seconds (the clock of
 *   `tandem run --timing-log`), seconds since the first phase, phase number
 *   from 1, the load; then a line with phase `end` and load `-`.
 * SIGINT and SIGTERM end the current phase early: the loads stop, GPU memory
 * is freed, the end line is printed and the exit status is 0. Exit status 1:
 * a load failed while running (message on stderr); 2: bad usage. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "stress_gpu.h"

#define MAX_PHASES 64
#define MAX_CPU 1024

typedef struct {
    double secs;
    int cpu;      /* spinner threads */
    double gpu;   /* fraction of the SMs, 0 = none */
    int pcie_mib; /* block size, 0 = none */
} phase;

static volatile sig_atomic_t g_signal;
static atomic_int g_stop;   /* the current phase's loads stop */
static atomic_int g_failed; /* a load failed */

static void on_signal(int sig) { g_signal = sig; }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *f) {
    fprintf(f, "usage: dev_stress --phase SECONDS:LOAD [--phase ...] [--gpu-ms MS]\n"
               "       dev_stress [--cpu N] [--gpu-sm FRACTION] [--pcie MIB] --for SECONDS [--gpu-ms MS]\n\n"
               "LOAD: none, or a comma list of cpu=N (busy threads), gpu=FRACTION (of the SMs, spun\n"
               "--gpu-ms per launch, default 2), pcie=MIB (pinned host blocks copied to the GPU).\n"
               "Prints each phase's start (CLOCK_MONOTONIC seconds, seconds since start, phase,\n"
               "load) as it happens; SIGINT/SIGTERM stop the loads and exit 0.\n");
}

static bool parse_double(const char *s, double lo, double hi, double *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static bool parse_int(const char *s, long lo, long hi, int *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}

/* "none" or "cpu=N,gpu=F,pcie=MIB" (any subset, any order) into p. */
static bool parse_load(const char *text, phase *p) {
    if (!strcmp(text, "none")) return true;
    char buf[256];
    if (!*text || strlen(text) >= sizeof buf) return false;
    strcpy(buf, text);
    for (char *save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq) return false;
        *eq = 0;
        const char *v = eq + 1;
        if (!strcmp(item, "cpu")) {
            if (!parse_int(v, 1, MAX_CPU, &p->cpu)) return false;
        } else if (!strcmp(item, "gpu")) {
            if (!parse_double(v, 0, 1, &p->gpu) || p->gpu <= 0) return false;
        } else if (!strcmp(item, "pcie")) {
            if (!parse_int(v, 1, 65536, &p->pcie_mib)) return false;
        } else {
            return false;
        }
    }
    return true;
}

static void load_text(const phase *p, char *out, size_t n) {
    int k = 0;
    out[0] = 0;
    if (p->cpu) k += snprintf(out + k, n - (size_t)k, "cpu=%d", p->cpu);
    if (p->gpu > 0) k += snprintf(out + k, n - (size_t)k, "%sgpu=%g", k ? "," : "", p->gpu);
    if (p->pcie_mib) k += snprintf(out + k, n - (size_t)k, "%spcie=%d", k ? "," : "", p->pcie_mib);
    if (!k) snprintf(out, n, "none");
}

#ifndef TND_HAVE_CUDA
static const char *no_cuda = "this build has no CUDA (dev/stress_gpu.cu is built with it: nvcc, TND_CUDA=ON)";
int stress_gpu_init(int *n_sm, char *name, size_t name_cap) {
    (void)n_sm, (void)name, (void)name_cap;
    return 1;
}
int stress_gpu_hog(int blocks, double spin_ms, bool (*stop)(void *), void *arg, stress_gpu_stats *st) {
    (void)blocks, (void)spin_ms, (void)stop, (void)arg, (void)st;
    return 1;
}
int stress_gpu_copy(size_t bytes, bool (*stop)(void *), void *arg, stress_gpu_stats *st) {
    (void)bytes, (void)stop, (void)arg, (void)st;
    return 1;
}
const char *stress_gpu_error(void) { return no_cuda; }
#endif

/* ---- the loads ------------------------------------------------------------ */

static void *spin_main(void *arg) {
    (void)arg;
    volatile unsigned long x = 0;
    while (!atomic_load_explicit(&g_stop, memory_order_relaxed)) x++;
    return NULL;
}

static bool should_stop(void *arg) {
    (void)arg;
    return atomic_load_explicit(&g_stop, memory_order_relaxed) != 0;
}

typedef struct {
    int blocks;
    double spin_ms;
    size_t bytes;
    stress_gpu_stats st;
    int rc;
} gpu_job;

static void *hog_main(void *arg) {
    gpu_job *j = arg;
    if ((j->rc = stress_gpu_hog(j->blocks, j->spin_ms, should_stop, NULL, &j->st))) {
        fprintf(stderr, "dev_stress: error: GPU hog: %s\n", stress_gpu_error());
        atomic_store(&g_failed, 1);
    }
    return NULL;
}

static void *copy_main(void *arg) {
    gpu_job *j = arg;
    if ((j->rc = stress_gpu_copy(j->bytes, should_stop, NULL, &j->st))) {
        fprintf(stderr, "dev_stress: error: PCIe copier: %s\n", stress_gpu_error());
        atomic_store(&g_failed, 1);
    }
    return NULL;
}

typedef struct {
    pthread_t spin[MAX_CPU];
    int n_spin;
    pthread_t hog, copy;
    bool has_hog, has_copy;
    gpu_job hog_job, copy_job;
} running;

static bool start_loads(const phase *p, int n_sm, double spin_ms, running *r) {
    memset(r, 0, sizeof *r);
    atomic_store(&g_stop, 0);
    for (int i = 0; i < p->cpu; i++) {
        if (pthread_create(&r->spin[i], NULL, spin_main, NULL)) {
            fprintf(stderr, "dev_stress: error: cannot start spinner %d\n", i + 1);
            return false;
        }
        r->n_spin++;
    }
    if (p->gpu > 0) {
        int b = (int)lround(p->gpu * n_sm);
        r->hog_job = (gpu_job){.blocks = b < 1 ? 1 : b, .spin_ms = spin_ms};
        if (pthread_create(&r->hog, NULL, hog_main, &r->hog_job)) return false;
        r->has_hog = true;
    }
    if (p->pcie_mib) {
        r->copy_job = (gpu_job){.bytes = (size_t)p->pcie_mib << 20};
        if (pthread_create(&r->copy, NULL, copy_main, &r->copy_job)) return false;
        r->has_copy = true;
    }
    return true;
}

static void stop_loads(running *r, int idx, int n_sm) {
    atomic_store(&g_stop, 1);
    for (int i = 0; i < r->n_spin; i++) pthread_join(r->spin[i], NULL);
    if (r->has_hog) {
        pthread_join(r->hog, NULL);
        const stress_gpu_stats *s = &r->hog_job.st;
        printf("# phase %d: gpu %d of %d SMs, %llu launches, mean %.2f ms\n", idx, r->hog_job.blocks, n_sm,
               (unsigned long long)s->n, s->n ? s->seconds * 1e3 / (double)s->n : 0.0);
    }
    if (r->has_copy) {
        pthread_join(r->copy, NULL);
        const stress_gpu_stats *s = &r->copy_job.st;
        printf("# phase %d: pcie %llu copies of %zu MiB, %.1f GB/s\n", idx, (unsigned long long)s->n,
               r->copy_job.bytes >> 20, s->seconds > 0 ? (double)s->n * (double)r->copy_job.bytes / s->seconds / 1e9 : 0.0);
    }
    fflush(stdout);
}

int main(int argc, char **argv) {
    phase ph[MAX_PHASES];
    int n_ph = 0;
    phase single = {0};
    bool single_set = false;
    double spin_ms = 2.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--phase")) {
            const char *colon = v ? strchr(v, ':') : NULL;
            char secs[64];
            ok = colon && n_ph < MAX_PHASES && (size_t)(colon - v) < sizeof secs;
            if (ok) {
                memcpy(secs, v, (size_t)(colon - v));
                secs[colon - v] = 0;
                ph[n_ph] = (phase){0};
                ok = parse_double(secs, 0.001, 86400, &ph[n_ph].secs) && parse_load(colon + 1, &ph[n_ph]);
                n_ph += ok;
            }
            if (!ok) {
                fprintf(stderr, "dev_stress: error: --phase needs SECONDS:LOAD (SECONDS in (0, 86400], LOAD none "
                                "or cpu=N,gpu=FRACTION,pcie=MIB; at most %d phases), not '%s'\n",
                        MAX_PHASES, v ? v : "");
                return 2;
            }
            i++;
            continue;
        } else if (!strcmp(a, "--cpu")) {
            ok = parse_int(v, 0, MAX_CPU, &single.cpu);
        } else if (!strcmp(a, "--gpu-sm")) {
            ok = parse_double(v, 0, 1, &single.gpu);
        } else if (!strcmp(a, "--pcie")) {
            ok = parse_int(v, 0, 65536, &single.pcie_mib);
        } else if (!strcmp(a, "--for")) {
            ok = parse_double(v, 0.001, 86400, &single.secs);
        } else if (!strcmp(a, "--gpu-ms")) {
            ok = parse_double(v, 0.01, 1000, &spin_ms);
            if (ok) {
                i++;
                continue;
            }
        } else {
            fprintf(stderr, "dev_stress: error: unknown option '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "dev_stress: error: bad value for %s: '%s' (--cpu 0..%d, --gpu-sm 0..1, --pcie 0..65536 "
                            "MiB, --for (0, 86400] s, --gpu-ms 0.01..1000)\n",
                    a, v ? v : "", MAX_CPU);
            return 2;
        }
        single_set = true;
        i++;
    }
    if (single_set) {
        if (n_ph) {
            fprintf(stderr, "dev_stress: error: give either --phase or --cpu/--gpu-sm/--pcie --for, not both\n");
            return 2;
        }
        if (single.secs <= 0) {
            fprintf(stderr, "dev_stress: error: --for SECONDS is needed\n");
            return 2;
        }
        ph[n_ph++] = single;
    }
    if (!n_ph) {
        usage(stderr);
        return 2;
    }

    /* the GPU is opened before the first phase, so a machine without one
     * fails before any load starts */
    bool need_gpu = false;
    double total = 0;
    for (int i = 0; i < n_ph; i++) {
        need_gpu |= ph[i].gpu > 0 || ph[i].pcie_mib > 0;
        total += ph[i].secs;
    }
    int n_sm = 0;
    char gpu_name[256] = "none";
    if (need_gpu && stress_gpu_init(&n_sm, gpu_name, sizeof gpu_name)) {
        fprintf(stderr, "dev_stress: error: gpu and pcie loads: %s\n", stress_gpu_error());
        return 2;
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    printf("# dev_stress: %d phases, %.1f s; %ld CPUs; GPU: %s", n_ph, total, sysconf(_SC_NPROCESSORS_ONLN),
           gpu_name);
    if (n_sm) printf(" (%d SMs)", n_sm);
    printf("\nclock_s\tt_s\tphase\tload\n");
    fflush(stdout);

    int rc = 0;
    const double t0 = now_s();
    double end = t0;
    for (int i = 0; i < n_ph && !g_signal && !rc; i++) {
        end += ph[i].secs; /* deadlines from t0: the phases do not drift */
        char text[128];
        load_text(&ph[i], text, sizeof text);
        running r;
        const bool started = start_loads(&ph[i], n_sm, spin_ms, &r);
        const double t = now_s();
        printf("%.6f\t%.6f\t%d\t%s\n", t, t - t0, i + 1, text);
        fflush(stdout);
        if (!started) rc = 1;
        while (!rc && !g_signal) {
            if (atomic_load(&g_failed)) {
                rc = 1;
                break;
            }
            const double left = end - now_s();
            if (left <= 0) break;
            const double step = left < 0.02 ? left : 0.02; /* a signal or a failure is seen within 20 ms */
            struct timespec ts = {0, (long)(step * 1e9)};
            nanosleep(&ts, NULL);
        }
        stop_loads(&r, i + 1, n_sm);
        if (atomic_load(&g_failed)) rc = 1;
    }
    const double t = now_s();
    if (g_signal) printf("# stopped by signal %d\n", (int)g_signal);
    printf("%.6f\t%.6f\tend\t-\n", t, t - t0);
    fflush(stdout);
    return rc;
}
