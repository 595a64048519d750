/* plan_internal.h — the .nrv plan file format and the runtime's private helpers.
 *
 * File layout (all integers little-endian; docs/PLAN_FORMAT.md is the prose version):
 *   header, NRV_PLAN_HEADER_BYTES bytes:
 *     char magic[8] = "NRVPLAN\0"; u32 version; u32 header_bytes;
 *     u64 file_bytes; u64 meta_offset; u64 meta_bytes; u64 weights_offset; u64 weights_bytes;
 *     u8 sha256[32]  -- over file[header_bytes, weights_offset): the metadata (which holds each
 *                       weight's own SHA-256) and padding;
 *     u8 reserved[8] (zero)
 *   metadata (meta_offset, meta_bytes): sections in this order, each a u32 count then records:
 *     strings   : u32 len, len bytes (UTF-8, no NUL)
 *     symbols   : u32 name (string index), i64 upper bound
 *     exprs     : u32 n_instr, n_instr × (i64 opcode, i64 operand)   -- RPN, see nrv_expr_op
 *     weights   : u64 offset (in the weight section, 64-aligned), u64 bytes, u32 file dtype,
 *                 u32 load dtype (f16 weights may be widened to f32 at load), u8 sha256[32] of
 *                 the weight's bytes in the file (verified when loaded; the key that shares
 *                 one loaded copy between sessions, see weight_store.c)
 *     tensors   : u32 name, u8 dtype, u8 rank, u8 storage, u8 pad, i32 ref, u64 offset,
 *                 u64 capacity (bytes reserved, at the symbols' upper bounds), i64 dims[rank]
 *                 -- a dim >= 0 is literal, < 0 is expression -(d+1)
 *     inputs    : u32 tensor
 *     binds     : u32 input, u32 axis, u32 symbol     -- symbol values come from feed dims
 *     outputs   : u32 tensor
 *     states    : u32 input, u32 output, u32 flags    -- output written where the next run reads;
 *                                                      flags: NRV_STATE_APPEND
 *     u64 arena_bytes
 *     ops       : u32 type (string), u32 name (string), u16 n_in, u16 n_out, u16 n_iattr,
 *                 u16 n_fattr, u16 n_dattr, u16 pad, i32 scratch tensor (-1 none),
 *                 i32 in[n_in] (-1 absent), i32 out[n_out], i64 iattr[], f32 fattr[], i64 dattr[]
 */
#ifndef NERVE_PLAN_INTERNAL_H
#define NERVE_PLAN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "plan_ops.h"

#define NRV_PLAN_MAGIC "NRVPLAN"
#define NRV_PLAN_VERSION 4u

/* State pair flags. APPEND: the output is written over the input in one buffer, instead of
 * into a second buffer: a KV cache with rows appended along its sequence axis, stored
 * sequence-major (op "kv_append", op_kv.c), or a cache of fixed length with rows written at
 * positions (op "tensor_scatter", op_stream.c). */
#define NRV_STATE_APPEND 1u
#define NRV_PLAN_HEADER_BYTES 96u
#define NRV_PLAN_MAX_EXPR_STACK 32

/* Where a tensor's bytes live. */
typedef enum nrv_storage {
    NRV_STORAGE_ARENA = 0,  /* the session's activation arena, at `offset` */
    NRV_STORAGE_WEIGHT = 1, /* weight `ref`, at `offset` inside it */
    NRV_STORAGE_INPUT = 2,  /* the caller's feed for input `ref` (or its state buffer) */
    NRV_STORAGE_STATE = 3   /* the state buffer written by this run for state pair `ref` */
} nrv_storage;

/* Expression opcodes (RPN over int64). */
typedef enum nrv_expr_op {
    NRV_EXPR_CONST = 0, /* push operand */
    NRV_EXPR_SYM = 1,   /* push symbol[operand] */
    NRV_EXPR_ADD = 2,
    NRV_EXPR_SUB = 3,
    NRV_EXPR_MUL = 4,
    NRV_EXPR_FLOORDIV = 5, /* floor division; a zero divisor fails the run */
    NRV_EXPR_MOD = 6,      /* floor modulo */
    NRV_EXPR_MIN = 7,
    NRV_EXPR_MAX = 8,
    NRV_EXPR_REF = 9,      /* push the value of an earlier expression (operand < this one) */
    NRV_EXPR_CEILDIV = 10
} nrv_expr_op;

/* SHA-256 of n bytes (sha256.c): the blocks through the SHA-256 instructions where the CPU
 * has them (NRV_CPU_SHA256), else the portable loop. */
void nrv_sha256(const void *data, size_t n, uint8_t out[32]);
/* The compression of nblocks 64-byte blocks into the state h (a..h, FIPS 180-4), one
 * implementation per instruction set; all give the same state. The x86 and aarch64 ones
 * need NRV_CPU_SHA256 and exist only in their architecture's build. */
void nrv_sha256_blocks_portable(uint32_t h[8], const uint8_t *p, size_t nblocks);
void nrv_sha256_blocks_x86(uint32_t h[8], const uint8_t *p, size_t nblocks);
void nrv_sha256_blocks_arm(uint32_t h[8], const uint8_t *p, size_t nblocks);
/* The K constants of the 64 rounds (shared by the implementations). */
extern const uint32_t nrv_sha256_k[64];

/* The process-wide weight store (weight_store.c). */
typedef struct nrv_weight_request {
    uint8_t digest[32];     /* SHA-256 of the file bytes */
    const uint8_t *src;     /* file bytes (file_bytes of them) */
    uint64_t file_bytes, loaded_bytes;
    uint32_t file_dtype, load_dtype;
} nrv_weight_request;
typedef struct nrv_weight_entry nrv_weight_entry;

/* Shares or loads n weights; out[i] is a reference to release with nrv_weights_release.
 * new_bytes: bytes this call loaded (the rest was shared). On error nothing is held. */
nrv_status nrv_weights_acquire(const nrv_weight_request *req, uint32_t n, nrv_weight_entry **out,
                               uint64_t *new_bytes);
const uint8_t *nrv_weight_data(const nrv_weight_entry *e);
void nrv_weights_release(nrv_weight_entry **entries, uint32_t n);
void nrv_weights_store_stats(uint64_t *entries, uint64_t *bytes);

#endif /* NERVE_PLAN_INTERNAL_H */
