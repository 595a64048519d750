"""nerve in one page: what runs here, an embedding lookup, a fused layernorm + linear,
and a memory pool. Run: .venv/bin/python examples/quickstart.py"""

import numpy as np

import nerve

# 1. What this machine runs: the kernel variant chosen for each op.
info = nerve.info()
print(f"nerve {info['version']} on {info['cpu']['arch']} ({info['cpu']['count']} CPUs)")
print("kernels:", info["kernels"])
print("cuda devices:", info["cuda"]["devices"], info["cuda"]["reason"])

# 2. Embedding lookup: ids of any shape, every id checked before anything is written.
rng = np.random.default_rng(0)
table = rng.standard_normal((1000, 256), dtype=np.float32)
vectors = nerve.ops.embedding(table, np.array([3, 999, 0]))
print("embedding:", vectors.shape, vectors.dtype)
try:
    nerve.ops.embedding(table, np.array([1000]))
except nerve.InputError as err:
    print("refused:", err)

# 3. Fused layernorm + linear, with no normalised tensor in memory.
gamma, beta = np.ones(256, np.float32), np.zeros(256, np.float32)
W = rng.standard_normal((64, 256), dtype=np.float32)
y = nerve.ops.layernorm_linear(vectors, gamma, beta, W)
print("layernorm_linear:", y.shape)

# 4. A pool: exact byte counts; a numpy view of pool memory used as out=.
with nerve.memory.DynamicPool(1 << 20, name="quickstart") as pool:
    with pool.alloc(y.nbytes) as buf:
        out = buf.array(np.float32, y.shape)
        nerve.ops.layernorm_linear(vectors, gamma, beta, W, out=out)
        assert np.array_equal(out, y)
        stats = pool.stats()
        print(f"pool: {stats['allocated']} bytes allocated, {stats['free']} free, peak {stats['peak']}")
        del out  # views keep the bytes alive: drop them before the buffer goes back
print(nerve.memory_report()["totals"])
