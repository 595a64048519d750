/* nrvc_w4_selftest.cpp — the GPU W4 kernel's decoding, run on the CPU.
 *
 * nrvc_w4_decode.h holds the per-lane arithmetic of w4_rows (nrvc_linear_w4.cu) as
 * host-callable functions. This program checks, without a GPU:
 *  1. every nibble and every int8 value decodes exactly to q - zero, for every zero point;
 *  2. a product done block by block the way a lane does it (packed_block_dot /
 *     unpacked_block_dot on weights laid out by libnerve's nrv_w4_pack, R = 1..8 rows,
 *     group scale per block) matches a float64 reference within fp32 summation error, for
 *     both layouts, awkward shapes, groups 32/64/128, with and without zero points;
 *  3. the packed bytes it reads are the ones nrv_w4_pack writes (same layout on CPU and GPU).
 * Seeded from NERVE_TEST_SEED when set, else from the clock (printed).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <vector>

#include "nerve.h"
#include "nrvc_w4_decode.h"

namespace {

int failures = 0;

#define EXPECT(cond, ...)                                                        \
    do {                                                                         \
        if (!(cond)) {                                                           \
            failures++;                                                          \
            fprintf(stderr, "%s:%d: FAILED: %s: ", __FILE__, __LINE__, #cond);   \
            fprintf(stderr, __VA_ARGS__);                                        \
            fputc('\n', stderr);                                                 \
        }                                                                        \
    } while (0)

uint64_t rng_state;
uint32_t next_u32() {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}
int rand_q() { return (int)(next_u32() % 16) - 8; }
float rand_unit() { return (float)((double)next_u32() / 2147483648.0 - 1.0); }

uint16_t f32_to_f16_bits(float f) {
    /* Scales here are exact small powers-of-two fractions: the conversion is exact. */
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    const uint32_t sign = (b >> 16) & 0x8000u;
    const int exp = (int)((b >> 23) & 0xFF) - 127 + 15;
    const uint32_t mant = (b >> 13) & 0x3FFu;
    return (uint16_t)(sign | ((uint32_t)exp << 10) | mant);
}
float f16_bits_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const int exp = (h >> 10) & 0x1F;
    const uint32_t mant = h & 0x3FFu;
    const uint32_t b = sign | ((uint32_t)(exp - 15 + 127) << 23) | (mant << 13);
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

void test_exact_decoding() {
    for (int zero = -8; zero <= 7; zero++) {
        const float off_p = nrvc::w4_offset(nrvc::kPackedBias, (float)zero);
        const float off_u = nrvc::w4_offset(nrvc::kUnpackedBias, (float)zero);
        for (int q = -8; q <= 7; q++) {
            const uint32_t nib = (uint32_t)(q + 8);
            for (int byte = 0; byte < 4; byte++) {
                for (int high = 0; high < 2; high++) {
                    const uint32_t word = nib << (8 * byte + 4 * high) | (0xFu << (8 * byte + 4 * (1 - high)));
                    const float v = nrvc::packed_weight(word, byte, high, off_p);
                    EXPECT(v == (float)(q - zero), "packed q=%d zero=%d byte=%d high=%d -> %g", q, zero, byte, high,
                           (double)v);
                }
            }
        }
        for (int q = -128; q <= 127; q++) {
            for (int byte = 0; byte < 4; byte++) {
                const uint32_t word = (uint32_t)(uint8_t)(int8_t)q << (8 * byte) | 0x5Au << (8 * ((byte + 1) % 4));
                const float v = nrvc::unpacked_weight(word, byte, off_u);
                EXPECT(v == (float)(q - zero), "unpacked q=%d zero=%d byte=%d -> %g", q, zero, byte, (double)v);
            }
        }
    }
}

template <int R>
void lane_product(const std::vector<float> &x, int64_t rows, int64_t in, int64_t out, int group,
                  const uint8_t *q, int layout, const std::vector<uint16_t> &scales, const std::vector<int8_t> &zero,
                  bool has_zero, std::vector<float> &y) {
    const int64_t groups = in / group;
    for (int64_t r0 = 0; r0 < rows; r0 += R) {
        for (int64_t o = 0; o < out; o++) {
            float acc[R] = {};
            for (int64_t blk = 0; blk < in / 32; blk++) {
                const int64_t g = o * groups + blk * 32 / group;
                const float scale = f16_bits_to_f32(scales[(size_t)g]);
                const float z = has_zero ? (float)zero[(size_t)g] : 0.0f;
                const float *xr[R];
                for (int r = 0; r < R; r++) {
                    const int64_t row = r0 + r < rows ? r0 + r : rows - 1;
                    xr[r] = x.data() + row * in + blk * 32;
                }
                float part[R] = {};
                if (layout == NRV_W4_PACKED) {
                    uint32_t w[4];
                    memcpy(w, q + o * (in / 2) + blk * 16, sizeof w);
                    nrvc::packed_block_dot<R>(w, xr, z, part);
                } else {
                    uint32_t w[8];
                    memcpy(w, q + o * in + blk * 32, sizeof w);
                    nrvc::unpacked_block_dot<R>(w, xr, z, part);
                }
                for (int r = 0; r < R; r++) acc[r] += scale * part[r];
            }
            for (int r = 0; r < R && r0 + r < rows; r++) y[(size_t)((r0 + r) * out + o)] = acc[r];
        }
    }
}

template <int R>
void check_shape(int64_t rows, int64_t in, int64_t out, int group, bool has_zero) {
    const int64_t groups = in / group;
    std::vector<int8_t> q((size_t)(out * in));
    for (auto &v : q) v = (int8_t)rand_q();
    std::vector<uint16_t> scales((size_t)(out * groups));
    for (auto &s : scales) s = f32_to_f16_bits((float)(1 + next_u32() % 64) / 512.0f);
    std::vector<int8_t> zero((size_t)(out * groups));
    for (auto &z : zero) z = has_zero ? (int8_t)rand_q() : 0;
    std::vector<float> x((size_t)(rows * in));
    for (auto &v : x) v = rand_unit();
    std::vector<uint8_t> packed((size_t)(out * in / 2));
    EXPECT(nrv_w4_pack(q.data(), out, in, packed.data()) == NRV_OK, "pack: %s", nrv_last_error());

    /* float64 reference and the bound on fp32 summation error: Σ|x·w| · (in + 2)·2^-24 */
    std::vector<double> ref((size_t)(rows * out)), mag((size_t)(rows * out));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < out; o++) {
            double s = 0, m = 0;
            for (int64_t k = 0; k < in; k++) {
                const int64_t g = o * groups + k / group;
                const double w = (double)f16_bits_to_f32(scales[(size_t)g]) *
                                 ((double)q[(size_t)(o * in + k)] - (double)zero[(size_t)g]);
                s += w * x[(size_t)(r * in + k)];
                m += fabs(w * x[(size_t)(r * in + k)]);
            }
            ref[(size_t)(r * out + o)] = s;
            mag[(size_t)(r * out + o)] = m;
        }
    for (int layout = 0; layout < 2; layout++) {
        std::vector<float> y((size_t)(rows * out), NAN);
        const uint8_t *bytes = layout == NRV_W4_PACKED ? packed.data() : reinterpret_cast<const uint8_t *>(q.data());
        lane_product<R>(x, rows, in, out, group, bytes, layout, scales, zero, has_zero, y);
        for (size_t i = 0; i < y.size(); i++) {
            const double tol = mag[i] * (double)(in + 2) * ldexp(1.0, -24) + 1e-30;
            if (!(fabs((double)y[i] - ref[i]) <= tol)) {
                EXPECT(false, "%s R=%d rows=%lld in=%lld out=%lld group=%d zero=%d: y[%zu] = %.9g, reference %.9g",
                       layout ? "packed" : "unpacked", R, (long long)rows, (long long)in, (long long)out, group,
                       (int)has_zero, i, (double)y[i], ref[i]);
                break;
            }
        }
    }
}

} /* namespace */

int main() {
    const char *seed_env = getenv("NERVE_TEST_SEED");
    const uint64_t seed = seed_env ? strtoull(seed_env, nullptr, 10) : (uint64_t)time(nullptr);
    rng_state = seed * 2654435761u + 1;
    printf("nrvc_w4_selftest: seed %llu\n", (unsigned long long)seed);

    test_exact_decoding();
    const int64_t widths[] = {32, 96, 128, 1024, 4096};
    const int64_t outs[] = {1, 3, 13, 97};
    const int64_t row_counts[] = {1, 3, 13};
    for (int64_t in : widths)
        for (int group : {32, 64, 128}) {
            if (in % group) continue;
            for (int64_t out : outs)
                for (int64_t rows : row_counts)
                    for (bool z : {false, true}) {
                        check_shape<1>(rows, in, out, group, z);
                        check_shape<8>(rows, in, out, group, z);
                    }
        }
    check_shape<2>(5, 256, 7, 64, true);
    check_shape<4>(9, 512, 5, 128, false);
    if (failures) {
        fprintf(stderr, "nrvc_w4_selftest: %d failure(s)\n", failures);
        return 1;
    }
    printf("nrvc_w4_selftest: ok\n");
    return 0;
}
