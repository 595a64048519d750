"""Pools through Python: exact counters, exhaustion, borrowers outliving owners, the
streaming ring, and numpy views that keep their bytes alive."""

import gc

import numpy as np
import pytest

import nerve
from nerve import _native
from nerve.memory import DynamicPool, StaticPool, StreamingPool

STAT_KEYS = {"name", "kind", "closed", "capacity", "allocated", "overhead", "free", "peak", "largest_free",
             "live_buffers", "total_allocs", "failed_allocs", "chunk_size", "chunk_count"}


def _balanced(stats):
    assert stats["allocated"] + stats["overhead"] + stats["free"] == stats["capacity"], stats
    return stats


def test_dynamic_pool_counters_are_exact():
    with DynamicPool(1 << 16, name="session") as pool:
        s0 = _balanced(pool.stats())
        assert set(s0) == STAT_KEYS
        assert (s0["kind"], s0["name"], s0["closed"]) == ("dynamic", "session", False)
        assert s0["capacity"] >= 1 << 16 and s0["allocated"] == 0 and s0["live_buffers"] == 0
        a = pool.alloc(1000)
        b = pool.alloc(24)
        s1 = _balanced(pool.stats())
        assert s1["allocated"] == 1024 and s1["live_buffers"] == 2 and s1["total_allocs"] == 2
        assert s1["peak"] == 1024 and s1["overhead"] > 0
        assert a.nbytes == 1000 and a.address % 64 == 0 and b.address % 64 == 0
        a.release()
        a.release()  # idempotent on the Python handle
        s2 = _balanced(pool.stats())
        assert s2["allocated"] == 24 and s2["live_buffers"] == 1 and s2["peak"] == 1024
        pool.reset_peak()
        assert pool.stats()["peak"] == 24
        b.release()
        s3 = _balanced(pool.stats())
        assert s3["allocated"] == 0 and s3["live_buffers"] == 0
        assert s3["free"] == s0["free"], "released neighbours must coalesce back to the whole arena"


def test_buffer_views_are_numpy_arrays_over_pool_memory():
    with DynamicPool(4096, name="views") as pool, pool.alloc(256) as buf:
        floats = buf.array(np.float32, (8, 8))
        floats[:] = np.arange(64, dtype=np.float32).reshape(8, 8)
        assert floats.__array_interface__["data"][0] == buf.address
        raw = buf.array()  # uint8 over all 256 bytes
        assert raw.shape == (256,) and raw.base is not None
        np.testing.assert_array_equal(raw[:8].view(np.float32), [0, 1])
        # a view is a valid out= for kernels: results land in pool memory
        nerve.ops.relu(np.full((8, 8), -1.0, np.float32), out=floats)
        assert not floats.any()
        with pytest.raises(nerve.InputError):
            buf.array(np.float32, (65,))
        del floats, raw


def test_exhaustion_raises_out_of_memory_naming_the_pool_and_changes_nothing():
    with StaticPool(4096, name="weights-q8") as pool:
        keep = pool.alloc(1024)
        before = pool.stats()
        with pytest.raises(nerve.OutOfMemoryError) as info:
            pool.alloc(1 << 20)
        err = info.value
        assert isinstance(err, MemoryError) and err.status_name == "NRV_ERR_OUT_OF_MEMORY"
        assert "weights-q8" in str(err) and str(1 << 20) in str(err), str(err)
        after = pool.stats()
        assert after["failed_allocs"] == before["failed_allocs"] + 1
        assert {k: v for k, v in after.items() if k != "failed_allocs"} == \
            {k: v for k, v in before.items() if k != "failed_allocs"}
        # the largest_free counter is the truth: that much succeeds, one more byte does not
        largest = after["largest_free"]
        assert largest > 0
        with pytest.raises(nerve.OutOfMemoryError):
            pool.alloc(largest + 1)
        pool.alloc(largest).release()
        keep.release()


def test_static_pool_reclaims_only_on_reset():
    with StaticPool(8192, name="static") as pool:
        a = pool.alloc(512)
        a.release()
        s = _balanced(pool.stats())
        assert s["allocated"] == 0 and s["overhead"] >= 512, "released static bytes wait for reset"
        b = pool.alloc(64)
        with pytest.raises(nerve.NativeError) as info:
            pool.reset()
        assert info.value.status_name == "NRV_ERR_STATE"
        b.release()
        pool.reset()
        s = _balanced(pool.stats())
        assert s["free"] == s["capacity"] and s["overhead"] == 0


def test_borrower_outlives_owner():
    pool = DynamicPool(1 << 14, name="owner")
    buf = pool.alloc(4000)
    buf.array(np.float64, (500,))[:] = np.arange(500)  # a temporary view, gone at once
    borrowed = buf.retain()
    assert buf.refcount == 2
    buf.release()
    assert borrowed.refcount == 1
    pool.close()
    pool.close()  # idempotent
    assert pool.closed
    with pytest.raises(nerve.NativeError, match="closed"):
        pool.alloc(16)
    with pytest.raises(nerve.NativeError, match="closed"):
        pool.stats()
    # the arena is still there for the borrower
    np.testing.assert_array_equal(borrowed.array(np.float64, (500,)), np.arange(500))
    borrowed.release()  # last reference: the C side frees the closed pool now
    with pytest.raises(nerve.NativeError, match="released"):
        borrowed.array()


def test_numpy_views_keep_the_bytes_alive_after_release():
    with DynamicPool(1 << 12, name="alive") as pool:
        buf = pool.alloc(128)
        view = buf.array(np.int32)
        view[:] = 7
        buf.release()
        assert pool.stats()["live_buffers"] == 1, "a live numpy view holds the bytes"
        assert (view == 7).all()
        del view
        gc.collect()
        assert pool.stats()["live_buffers"] == 0 and pool.stats()["allocated"] == 0


def test_dropped_buffer_objects_return_their_bytes():
    with DynamicPool(1 << 12, name="gc") as pool:
        for _ in range(100):
            pool.alloc(1000)  # dropped at once: the handle's finalizer releases it
        s = pool.stats()
        assert s["live_buffers"] == 0 and s["total_allocs"] == 100 and s["failed_allocs"] == 0


def test_streaming_ring_hands_out_chunks_in_ring_order():
    with StreamingPool(chunk_size=200, chunk_count=4, name="mic") as ring:
        s = _balanced(ring.stats())
        assert (s["kind"], s["chunk_size"], s["chunk_count"]) == ("streaming", 200, 4)
        chunks = [ring.alloc() for _ in range(4)]
        addresses = [c.address for c in chunks]
        stride = addresses[1] - addresses[0]
        assert stride >= 200 and addresses == [addresses[0] + i * stride for i in range(4)]
        assert ring.stats()["allocated"] == 800 and ring.stats()["largest_free"] == 0
        with pytest.raises(nerve.OutOfMemoryError, match="mic"):
            ring.alloc(10)
        with pytest.raises(nerve.InputError, match="chunk size"):
            ring.alloc(201)
        chunks[2].release()
        chunks[1].release()
        # the ring resumes where it stopped (after chunk 3, i.e. at 0): 1 then 2
        c1 = ring.alloc(50)
        c2 = ring.alloc(50)
        assert (c1.address, c2.address) == (addresses[1], addresses[2])
        chunks[0].release()
        c0 = ring.alloc(1)
        assert c0.address == addresses[0]
        assert ring.stats()["allocated"] == 200 + 50 + 50 + 1 and ring.stats()["live_buffers"] == 4
        with pytest.raises(nerve.InputError):
            ring.reset()  # chunks return to the ring on release; nothing to reset
        for c in (c0, c1, c2, chunks[3]):
            c.release()
        assert ring.stats()["allocated"] == 0


def test_bad_sizes():
    with pytest.raises(nerve.InputError):
        DynamicPool(0)
    with pytest.raises(nerve.InputError):
        DynamicPool(-5)
    with pytest.raises(nerve.InputError):
        StreamingPool(0, 3)
    with DynamicPool(1024) as pool:
        with pytest.raises(nerve.InputError):
            pool.alloc(0)
        with pytest.raises(nerve.InputError):
            pool.alloc(1.5)


def test_system_allocation_failure_becomes_out_of_memory():
    _native.lib.nrv_debug_fail_alloc_after(1)
    try:
        with pytest.raises(nerve.OutOfMemoryError, match="system allocation failed"):
            StaticPool(1 << 20, name="injected")
    finally:
        _native.lib.nrv_debug_fail_alloc_after(0)
    StaticPool(1 << 20, name="after-injection").close()


def test_memory_report_covers_the_open_pools_of_this_process():
    gc.collect()
    a = StaticPool(1 << 14, name="report-static")
    b = StreamingPool(64, 8, name="report-ring")
    held = a.alloc(100)
    report = nerve.memory_report()
    names = {p["name"]: p for p in report["pools"]}
    assert names["report-static"]["allocated"] == 100 and names["report-ring"]["chunk_count"] == 8
    totals = report["totals"]
    assert totals["pools"] == len(report["pools"])
    for key in ("capacity", "allocated", "overhead", "free", "live_buffers"):
        assert totals[key] == sum(p[key] for p in report["pools"])
    held.release()
    a.close()
    assert "report-static" not in {p["name"] for p in nerve.memory_report()["pools"]}
    del b
    gc.collect()
    assert "report-ring" not in {p["name"] for p in nerve.memory_report()["pools"]}


def _thp_mode():
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            text = f.read()
    except OSError:
        return None
    return text[text.index("[") + 1: text.index("]")] if "[" in text else None


def _anon_huge_kib():
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1])
    return 0


def _vm_flags(address: int):
    """VmFlags of the mapping holding address (from /proc/self/smaps), or None."""
    flags, inside = None, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and line.startswith("VmFlags:"):
                flags = line.split()[1:]
    return flags


@pytest.mark.skipif(_thp_mode() not in ("madvise", "always"), reason="this kernel has transparent huge pages off")
def test_large_static_pool_is_backed_by_huge_pages():
    # A weight arena gathered at random rows must not pay a page walk per row: nerve asks
    # for transparent huge pages (madvise MADV_HUGEPAGE) on arenas of 8 MiB and more. Whether
    # the kernel then finds free huge pages depends on the machine's fragmentation, so the
    # request is what is asserted (smaps flag "hg"); the pages found are reported.
    before = _anon_huge_kib()
    with StaticPool(64 << 20, name="weights") as pool:
        with pool.alloc(60 << 20) as buf:
            buf.array()[:] = 1  # touch every page
            flags = _vm_flags(buf.address + (30 << 20))
            assert flags is not None and "hg" in flags, f"no MADV_HUGEPAGE on the arena (VmFlags {flags})"
            print(f"{_anon_huge_kib() - before} KiB of the 60 MiB buffer on huge pages")
