/* Error messages, logging, allocation and timing shared by every module. */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config.h"

static _Thread_local char g_err[1024];

const char *tnd_last_error(void) { return g_err; }

void tnd_clear_error(void) { g_err[0] = 0; }

tnd_status tnd_fail(tnd_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    return st;
}

tnd_status tnd_fail_wrap(tnd_status st, const char *fmt, ...) {
    char old[sizeof g_err];
    memcpy(old, g_err, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof g_err)
        snprintf(g_err + n, sizeof g_err - (size_t)n, "%s", old);
    return st;
}

const char *tnd_status_name(tnd_status st) {
    switch (st) {
    case TND_OK: return "ok";
    case TND_ERR_IO: return "io";
    case TND_ERR_FORMAT: return "format";
    case TND_ERR_UNSUPPORTED: return "unsupported";
    case TND_ERR_NOMEM: return "out of memory";
    case TND_ERR_ARG: return "bad argument";
    case TND_ERR_LIMIT: return "limit";
    case TND_ERR_BACKEND: return "backend";
    case TND_ERR_INTERNAL: return "internal";
    }
    return "unknown";
}

static int g_log_level = -1;

int tnd_log_level(void) {
    if (g_log_level < 0) {
        g_log_level = tnd_config_get()->log_level;
    }
    return g_log_level;
}

void tnd_log_set_level(int level) { g_log_level = level; }

void tnd_log(int level, const char *fmt, ...) {
    if (level > tnd_log_level()) return;
    static const char *tag[] = {"error", "warning", "info", "debug"};
    fprintf(stderr, "tandem: %s: ", tag[level < 0 ? 0 : level > 3 ? 3 : level]);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

const char *tnd_file_kind(unsigned mode) {
    if (S_ISREG(mode)) return "a regular file";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

tnd_status tnd_open_regular(const char *path, const char *what, uint64_t max_bytes, FILE **out) {
    if (!path || !*path) return tnd_fail(TND_ERR_ARG, "%s: no path given", what);
    /* O_NONBLOCK: opening a FIFO with no writer returns at once instead of
     * waiting for one; regular files ignore the flag */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return tnd_fail(TND_ERR_IO, "%s '%s': cannot open: %s", what, path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return tnd_fail(TND_ERR_IO, "%s '%s': cannot stat: %s", what, path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return tnd_fail(TND_ERR_IO, "%s '%s' is %s, not a regular file", what, path, tnd_file_kind(sb.st_mode));
    }
    if ((uint64_t)sb.st_size > max_bytes) {
        close(fd);
        return tnd_fail(TND_ERR_LIMIT, "%s '%s' is %.1f MiB; a %s may be %.1f MiB at most", what, path,
                        sb.st_size / 1048576.0, what, max_bytes / 1048576.0);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        return tnd_fail(TND_ERR_IO, "%s '%s': %s", what, path, strerror(e));
    }
    *out = f;
    return TND_OK;
}

tnd_status tnd_read_regular(const char *path, const char *what, uint64_t max_bytes, char **out, size_t *n) {
    FILE *f;
    tnd_status st = tnd_open_regular(path, what, max_bytes, &f);
    if (st) return st;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            fclose(f);
            return tnd_fail(TND_ERR_NOMEM, "%s '%s': out of memory", what, path);
        }
        size_t r = fread(buf + len, 1, cap - len - 1, f);
        len += r;
        if (r == 0) break;
        if (len > max_bytes) {
            free(buf);
            fclose(f);
            return tnd_fail(TND_ERR_LIMIT, "%s '%s' grew past %.1f MiB while it was read", what, path,
                            max_bytes / 1048576.0);
        }
        if (len + 1 == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) free(buf);
            buf = b;
        }
    }
    bool err = ferror(f) != 0;
    fclose(f);
    if (err) {
        free(buf);
        return tnd_fail(TND_ERR_IO, "%s '%s': read error", what, path);
    }
    buf[len] = 0;
    *out = buf;
    *n = len;
    return TND_OK;
}

size_t tnd_utf8_seq_len(const unsigned char *p, size_t n) {
    unsigned c = p[0];
    size_t len;
    unsigned cp;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07;
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

void tnd_json_str(FILE *f, const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        size_t l = tnd_utf8_seq_len(p + i, n - i < 4 ? n - i : 4);
        if (l > 1) {
            fwrite(p + i, 1, l, f);
            i += l;
            continue;
        }
        i++;
        if (l == 0) fprintf(f, "\\udc%02x", c);
        else if (c == '"') fputs("\\\"", f);
        else if (c == '\\') fputs("\\\\", f);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c < 0x20 || c == 0x7f) fprintf(f, "\\u%04x", c);
        else fputc((int)c, f);
    }
    fputc('"', f);
}

void *tnd_malloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) tnd_fail(TND_ERR_NOMEM, "out of memory allocating %zu bytes", n);
    return p;
}

void *tnd_calloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) tnd_fail(TND_ERR_NOMEM, "out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

void *tnd_aligned_alloc(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? (n + 63) & ~(size_t)63 : 64) != 0) {
        tnd_fail(TND_ERR_NOMEM, "out of memory allocating %zu aligned bytes", n);
        return NULL;
    }
    return p;
}

void tnd_aligned_free(void *p) { free(p); }

double tnd_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int tnd_physical_cores(void) {
    /* Count distinct (physical id, core id) pairs; SMT siblings share one. */
    FILE *f = fopen("/proc/cpuinfo", "r");
    int n = 0;
    if (f) {
        char line[256];
        int phys = 0, seen_pairs[1024][2], n_pairs = 0;
        while (fgets(line, sizeof line, f)) {
            if (!strncmp(line, "physical id", 11)) phys = atoi(strchr(line, ':') + 1);
            else if (!strncmp(line, "core id", 7)) {
                int core = atoi(strchr(line, ':') + 1), dup = 0;
                for (int i = 0; i < n_pairs; i++)
                    if (seen_pairs[i][0] == phys && seen_pairs[i][1] == core) dup = 1;
                if (!dup && n_pairs < 1024) {
                    seen_pairs[n_pairs][0] = phys;
                    seen_pairs[n_pairs][1] = core;
                    n_pairs++;
                }
            }
        }
        fclose(f);
        n = n_pairs;
    }
    if (n <= 0) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
#ifdef __linux__
    /* no more than the CPUs this process may run on (taskset, cgroups'
     * cpusets): threads beyond them only wait for each other */
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        const int allowed = CPU_COUNT(&set);
        if (allowed > 0 && allowed < n) n = allowed;
    }
#endif
    return n > 0 ? n : 1;
}

const char *tnd_cpu_model_name(void) {
    static char name[160];
    if (name[0]) return name;
    snprintf(name, sizeof name, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return name;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            char *p = strchr(line, ':');
            if (p) {
                p += p[1] == ' ' ? 2 : 1;
                p[strcspn(p, "\n")] = 0;
                snprintf(name, sizeof name, "%s", p);
            }
            break;
        }
    fclose(f);
    return name;
}

uint64_t tnd_fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    return h;
}

uint64_t tnd_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
