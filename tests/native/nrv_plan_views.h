/* nrv_plan_views.h — tensor views for the shape and reduce plan-op tests: allocate a view
 * of any dtype and shape (filled with a sentinel byte so "untouched" can be checked), free
 * it, random dims, flat index <-> coordinates. */
#ifndef NRV_PLAN_VIEWS_H
#define NRV_PLAN_VIEWS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nrv_test.h"
#include "plan/plan_ops.h"

#define SENTINEL 0xA5 /* byte every fresh view is filled with */

/* Extents the random shapes draw from: awkward sizes around vector widths. */
static const int64_t SIZES[] = {1, 2, 3, 5, 7, 13, 33, 129};

static inline size_t esz_of(int dt) { return nrv_dtype_size((nrv_dtype)dt); }

static inline nrv_tview mk(int dt, int rank, const int64_t *dims) {
    nrv_tview v;
    memset(&v, 0, sizeof v);
    v.rank = rank;
    v.dtype = dt;
    v.numel = 1;
    for (int d = 0; d < rank; d++) {
        v.dims[d] = dims[d];
        v.numel *= dims[d];
    }
    const size_t bytes = (size_t)v.numel * esz_of(dt);
    v.data = malloc(bytes ? bytes : 1);
    if (!v.data) {
        fprintf(stderr, "plan-op test: out of memory\n");
        exit(2);
    }
    memset(v.data, SENTINEL, bytes);
    return v;
}

static inline void freev(nrv_tview *v) {
    free(v->data);
    v->data = NULL;
}

static inline size_t nbytes(const nrv_tview *v) { return (size_t)v->numel * esz_of(v->dtype); }

static inline int untouched(const nrv_tview *v) {
    const uint8_t *p = v->data;
    for (size_t i = 0; i < nbytes(v); i++)
        if (p[i] != SENTINEL) return 0;
    return 1;
}

static inline int64_t rnd(int64_t n) { return (int64_t)(nrv_test_u64() % (uint64_t)n); }

static inline void rand_dims(int r, int64_t *dims, int64_t cap) {
    for (;;) {
        int64_t p = 1;
        for (int d = 0; d < r; d++) {
            dims[d] = SIZES[rnd(8) < 6 ? rnd(6) : 6 + rnd(2)];
            p *= dims[d];
        }
        if (p <= cap) return;
    }
}

static inline void unravel(int64_t flat, int rank, const int64_t *dims, int64_t *idx) {
    for (int d = rank - 1; d >= 0; d--) {
        idx[d] = dims[d] ? flat % dims[d] : 0;
        flat = dims[d] ? flat / dims[d] : 0;
    }
}

#endif /* NRV_PLAN_VIEWS_H */
