/* embedding.c — scalar reference embedding lookups (ids already validated). */
#include <string.h>

#include "kernels.h"

void nrv_embedding_f32_ref(const void *table, const float *row_scales, int64_t dim, const void *ids,
                           int ids_int64, int64_t n_ids, float *out) {
    (void)row_scales;
    const float *t = table;
    for (int64_t i = 0; i < n_ids; i++) {
        const float *row = t + nrv_id_at(ids, ids_int64, i) * dim;
        float *dst = out + i * dim;
        for (int64_t j = 0; j < dim; j++) dst[j] = row[j];
    }
}

void nrv_embedding_f16_ref(const void *table, const float *row_scales, int64_t dim, const void *ids,
                           int ids_int64, int64_t n_ids, float *out) {
    (void)row_scales;
    const uint16_t *t = table;
    for (int64_t i = 0; i < n_ids; i++) {
        const uint16_t *row = t + nrv_id_at(ids, ids_int64, i) * dim;
        float *dst = out + i * dim;
        for (int64_t j = 0; j < dim; j++) dst[j] = nrv_half_to_float(row[j]);
    }
}

void nrv_embedding_q8_ref(const void *table, const float *row_scales, int64_t dim, const void *ids,
                          int ids_int64, int64_t n_ids, float *out) {
    const int8_t *t = table;
    for (int64_t i = 0; i < n_ids; i++) {
        const int64_t id = nrv_id_at(ids, ids_int64, i);
        const int8_t *row = t + id * dim;
        const float scale = row_scales[id];
        float *dst = out + i * dim;
        for (int64_t j = 0; j < dim; j++) dst[j] = (float)row[j] * scale;
    }
}
