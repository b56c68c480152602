/* Dequantizer tables per ISA: scalar = the quant/ references (to_float);
 * AVX2 and AVX-512 override what they implement, each level starting from
 * the one below so a format without an AVX-512 version uses the AVX2 one. */
#include "cpu/dequant.h"

#include <pthread.h>
#include <string.h>

#include "cpu/matmul_impl.h"

static tnd_dequant_fn g_tab[3][TND_TYPE_COUNT];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void build(void) {
    for (int t = 0; t < TND_TYPE_COUNT; t++) {
        const tnd_type_traits *tr = tnd_type_traits_get(t);
        g_tab[TND_ISA_SCALAR][t] = tr && tr->supported ? tr->to_float : NULL;
    }
    memcpy(g_tab[TND_ISA_AVX2], g_tab[TND_ISA_SCALAR], sizeof g_tab[0]);
    tnd_cpu_dequant_table_avx2(g_tab[TND_ISA_AVX2]);
    memcpy(g_tab[TND_ISA_AVX512], g_tab[TND_ISA_AVX2], sizeof g_tab[0]);
    tnd_cpu_dequant_table_avx512(g_tab[TND_ISA_AVX512]);
}

tnd_dequant_fn tnd_cpu_dequant_fn_isa(tnd_type t, int isa) {
    if ((int)t < 0 || (int)t >= TND_TYPE_COUNT || isa < 0 || isa > TND_ISA_AVX512) return NULL;
    pthread_once(&g_once, build);
    return g_tab[isa][t];
}

tnd_dequant_fn tnd_cpu_dequant_fn(tnd_type t) { return tnd_cpu_dequant_fn_isa(t, (int)tnd_cpu_isa_id_current()); }
