/* The CUDA backend's pinned host memory (backend.h: host_alloc, host_free,
 * host_register, host_unregister). host_alloc: page-locked, mapped into the
 * device, in one cudaHostAlloc where the driver gives one, else as a
 * contiguous mapping registered in pieces. Every such region is recorded in
 * the backend's state, so host_free knows how it was made and the backend's
 * end releases what is left. host_register: the caller's memory locked where
 * it is, in pieces, recorded process-wide (the runtime's registrations are)
 * and counted, so that two contexts of one model share one. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "config.h"
#include "cuda/backend_cuda.cuh"

static tnd_status host_push(cu_ctx *c, struct cu_host h) {
    pthread_mutex_lock(&c->mu);
    if (c->n_hosts == c->cap_hosts) {
        size_t cap = c->cap_hosts ? 2 * c->cap_hosts : 16;
        void *p = realloc(c->hosts, cap * sizeof *c->hosts);
        if (!p) {
            pthread_mutex_unlock(&c->mu);
            return tnd_fail(TND_ERR_NOMEM, "cuda: out of host memory");
        }
        c->hosts = (struct cu_host *)p;
        c->cap_hosts = cap;
    }
    c->hosts[c->n_hosts++] = h;
    pthread_mutex_unlock(&c->mu);
    return TND_OK;
}

static void unregister_pieces(void *host, size_t n_pieces, size_t piece) {
    for (size_t i = 0; i < n_pieces; i++) cudaHostUnregister((char *)host + i * piece);
}

tnd_status cu_host_alloc(tnd_backend *b, size_t size, void **host, void **dev) {
    cu_ctx *c = ctx_of(b);
    if (size == 0) size = 1;
    set_device(c);
    void *h = NULL, *d = NULL;
    /* TND_CUDA_PIN_PIECES=MIB: pieces of MIB MiB for every region of more
     * than one (tests the fallback; read at each call, so a test can set it
     * with tnd_config_set) */
    const long mib = tnd_config_get()->cuda_pin_pieces;
    const size_t piece = mib >= 1 && mib <= 4096 ? (size_t)mib << 20 : CU_PIN_PIECE;
    cudaError_t e = mib >= 1 && mib <= 4096 && size > piece
                        ? cudaErrorMemoryAllocation
                        : cudaHostAlloc(&h, size, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e == cudaSuccess) {
        e = cudaHostGetDevicePointer(&d, h, 0);
        if (e != cudaSuccess) {
            cudaFreeHost(h);
            return cu_err(e, "cudaHostGetDevicePointer");
        }
        struct cu_host rec = {h, d, size, false, 0, 0};
        tnd_status st = host_push(c, rec);
        if (st) cudaFreeHost(h);
        else {
            *host = h;
            *dev = d;
        }
        return st;
    }
    cudaGetLastError();
    /* One pinned region of this size was refused (some drivers cap a single
     * pinning): pin a contiguous mapping in pieces. With unified addressing a
     * registered piece's device address is its host address, so the pieces
     * form one device range; anything else is reported. */
    size_t n_pieces = (size + piece - 1) / piece;
    size_t span = n_pieces * piece;
    void *m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return tnd_fail(TND_ERR_NOMEM, "cuda: pinning %.1f MiB failed (%s) and so did mapping it in pieces",
                        size / 1048576.0, cudaGetErrorString(e));
    for (size_t i = 0; i < n_pieces; i++) {
        char *p = (char *)m + i * piece;
        void *pd = NULL;
        cudaError_t e2 = cudaHostRegister(p, piece, cudaHostRegisterMapped | cudaHostRegisterPortable);
        if (e2 == cudaSuccess) e2 = cudaHostGetDevicePointer(&pd, p, 0);
        if (e2 != cudaSuccess || pd != (void *)p) {
            cudaGetLastError();
            unregister_pieces(m, i + (e2 == cudaSuccess ? 1 : 0), piece);
            munmap(m, span);
            return tnd_fail(TND_ERR_NOMEM,
                            "cuda: pinning %.1f MiB failed (%s); pinning it in %zu pieces of %llu MiB stopped at "
                            "piece %zu (%.1f MiB pinned): %s",
                            size / 1048576.0, cudaGetErrorString(e), n_pieces, (unsigned long long)(piece >> 20), i,
                            (double)(i * piece) / 1048576.0,
                            e2 != cudaSuccess ? cudaGetErrorString(e2) : "device address differs from host address");
        }
    }
    struct cu_host rec = {m, m, span, true, n_pieces, piece};
    tnd_status st = host_push(c, rec);
    if (st) {
        unregister_pieces(m, n_pieces, piece);
        munmap(m, span);
        return st;
    }
    *host = m;
    *dev = m;
    return TND_OK;
}

void cu_host_free(tnd_backend *b, void *host) {
    if (!host) return;
    cu_ctx *c = ctx_of(b);
    cu_flush_all(b);
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->n_hosts; i++) {
        if (c->hosts[i].host == host) {
            struct cu_host h = c->hosts[i];
            c->hosts[i] = c->hosts[--c->n_hosts];
            pthread_mutex_unlock(&c->mu);
            set_device(c);
            if (h.registered) {
                cudaDeviceSynchronize(); /* unmapping memory the device may still read */
                unregister_pieces(h.host, h.n_pieces, h.piece);
                munmap(h.host, h.size);
            } else {
                cudaFreeHost(h.host);
            }
            return;
        }
    }
    pthread_mutex_unlock(&c->mu);
    TND_WARN("cuda: host_free of a pointer this backend did not allocate (%p)", host);
}

void cu_host_free_all(cu_ctx *c) {
    for (size_t i = 0; i < c->n_hosts; i++) {
        if (c->hosts[i].registered) {
            unregister_pieces(c->hosts[i].host, c->hosts[i].n_pieces, c->hosts[i].piece);
            munmap(c->hosts[i].host, c->hosts[i].size);
        } else {
            cudaFreeHost(c->hosts[i].host);
        }
    }
    free(c->hosts);
    c->hosts = NULL;
    c->n_hosts = c->cap_hosts = 0;
}

/* ---- the caller's memory, registered in place -------------------------------- */

struct cu_reg {
    uintptr_t base;
    size_t size, piece;
    int refs;
};
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
#define CU_MAX_REGS 16
static struct cu_reg regs[CU_MAX_REGS];
static int n_regs;

static void unregister_range(uintptr_t base, size_t size, size_t piece) {
    for (size_t at = 0; at < size; at += piece) cudaHostUnregister((void *)(base + at));
}

tnd_status cu_host_register(tnd_backend *b, void *p, size_t size) {
    cu_ctx *c = ctx_of(b);
    if (!p || !size) return tnd_fail(TND_ERR_ARG, "cuda: registering %zu bytes at %p", size, p);
    set_device(c);
    int ro = 0;
    if (cudaDeviceGetAttribute(&ro, cudaDevAttrHostRegisterReadOnlySupported, c->device) != cudaSuccess || !ro) {
        cudaGetLastError();
        return tnd_fail(TND_ERR_UNSUPPORTED, "cuda: the device cannot read host memory registered read-only");
    }
    const uintptr_t base = (uintptr_t)p;
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < n_regs; i++)
        if (regs[i].base == base && regs[i].size == size) {
            regs[i].refs++;
            pthread_mutex_unlock(&reg_mu);
            return TND_OK;
        }
    if (n_regs == CU_MAX_REGS) {
        pthread_mutex_unlock(&reg_mu);
        return tnd_fail(TND_ERR_NOMEM, "cuda: %d host ranges registered already", CU_MAX_REGS);
    }
    /* In pieces: some drivers cap one registration. Read-only: a model
     * file's private mapping is not writable, and a writable pinning would
     * copy every page. (Threads do not help: on the H200's host one pinned
     * 9 GiB in 5.4 s, four in 6.2, eight in 7.0.) */
    const size_t piece = CU_PIN_PIECE;
    for (size_t at = 0; at < size; at += piece) {
        const size_t n = size - at < piece ? size - at : piece;
        cudaError_t e = cudaHostRegister((void *)(base + at), n, cudaHostRegisterPortable | cudaHostRegisterReadOnly);
        if (e != cudaSuccess) {
            cudaGetLastError();
            unregister_range(base, at, piece);
            pthread_mutex_unlock(&reg_mu);
            return tnd_fail(TND_ERR_NOMEM, "cuda: pinning %.1f MiB in place stopped after %.1f MiB: %s",
                            size / 1048576.0, at / 1048576.0, cudaGetErrorString(e));
        }
    }
    regs[n_regs++] = (struct cu_reg){base, size, piece, 1};
    pthread_mutex_unlock(&reg_mu);
    return TND_OK;
}

bool cu_host_registered(tnd_backend *b, const void *p, size_t size) {
    (void)b;
    bool found = false;
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < n_regs && !found; i++) found = regs[i].base == (uintptr_t)p && regs[i].size == size;
    pthread_mutex_unlock(&reg_mu);
    return found;
}

void cu_host_unregister(tnd_backend *b, void *p) {
    cu_ctx *c = ctx_of(b);
    cu_flush_all(b);
    set_device(c);
    pthread_mutex_lock(&reg_mu);
    int i = 0;
    while (i < n_regs && regs[i].base != (uintptr_t)p) i++;
    if (i == n_regs) {
        pthread_mutex_unlock(&reg_mu);
        TND_WARN("cuda: host_unregister of memory not registered (%p)", p);
        return;
    }
    if (--regs[i].refs == 0) {
        cudaDeviceSynchronize(); /* copies may still read it */
        unregister_range(regs[i].base, regs[i].size, regs[i].piece);
        regs[i] = regs[--n_regs];
    }
    pthread_mutex_unlock(&reg_mu);
}

bool cu_host_piece(cu_ctx *c, uintptr_t h, uintptr_t *base, size_t *piece) {
    bool found = false;
    pthread_mutex_lock(&c->mu); /* (a few regions; nothing beside a copy's launch) */
    for (size_t i = 0; i < c->n_hosts && !found; i++) {
        const uintptr_t b0 = (uintptr_t)c->hosts[i].host;
        if (c->hosts[i].registered && h >= b0 && h < b0 + c->hosts[i].size) {
            *base = b0;
            *piece = c->hosts[i].piece;
            found = true;
        }
    }
    pthread_mutex_unlock(&c->mu);
    if (found) return true;
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < n_regs && !found; i++)
        if (h >= regs[i].base && h < regs[i].base + regs[i].size) {
            *base = regs[i].base;
            *piece = regs[i].piece;
            found = true;
        }
    pthread_mutex_unlock(&reg_mu);
    return found;
}
