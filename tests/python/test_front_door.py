"""The Python front door: data as the file says, DataLoader's iteration and resume habits, close
and Ctrl-C, ranks from every launcher, keywords checked, the current DLPack protocol."""
import ctypes
import os
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

import sluice

N = 100


@pytest.fixture()
def recs(tmp_path):
    data = np.repeat(np.arange(N, dtype="<u4")[:, None], 4, axis=1)
    (tmp_path / "d.bin").write_bytes(data.tobytes())
    (tmp_path / "l.bin").write_bytes((np.arange(N) % 5).astype("<i8").tobytes())
    return str(tmp_path / "d.bin"), str(tmp_path / "l.bin")


def loader_of(recs, **kw):
    path, labels = recs
    args = dict(batch_size=10, sampler=sluice.sample.shuffle(seed=3), workers=2)
    args.update(kw)
    return sluice.Loader(sluice.records(path, record_bytes=16, labels=labels, dtype="uint32", shape=(4,)), **args)


def ids(b):
    return np.from_dlpack(b["data"])[:, 0].tolist()


# --- the data is what the file says ------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int16", "uint8", "bool"])
def test_npy_rows_keep_the_arrays_dtype_and_shape(tmp_path, dtype):
    x = (np.arange(7 * 3 * 2) % 5).reshape(7, 3, 2).astype(dtype)
    np.save(tmp_path / "x.npy", x)
    ld = sluice.Loader(sluice.npy(tmp_path / "x.npy"), batch_size=4, sampler=sluice.sample.sequential(), workers=1)
    got = np.concatenate([np.from_dlpack(b["data"]).copy() for b in ld])
    want_dtype = np.uint8 if dtype == "bool" and got.dtype == np.uint8 else x.dtype  # bool: uint8 on DLPack < 0.8
    assert got.dtype == want_dtype and got.shape == x.shape
    assert (got == x.astype(want_dtype)).all()


def test_npy_conversions_that_change_values_are_refused(tmp_path):
    np.save(tmp_path / "f.npy", np.ones((4, 3), np.float32))
    np.save(tmp_path / "i.npy", np.ones((4, 3), np.int64))
    np.save(tmp_path / "u.npy", np.full((4, 3), 255, np.uint8))
    with pytest.raises(sluice.UsageError, match="output='float32' for field 'data' of dtype int64"):
        sluice.Loader(sluice.npy(tmp_path / "i.npy", output="float32"))
    with pytest.raises(sluice.UsageError, match="mean=/std= normalise uint8 data; field 'data' is float32"):
        sluice.Loader(sluice.npy(tmp_path / "f.npy", output="float32", mean=0.5, std=0.5))
    same = sluice.Loader(sluice.npy(tmp_path / "f.npy", output="float32"), sampler=sluice.sample.sequential())
    assert (np.from_dlpack(next(iter(same))["data"]) == 1.0).all()            # float32 stays as it is
    scaled = sluice.Loader(sluice.npy(tmp_path / "u.npy", output="float32"), sampler=sluice.sample.sequential())
    b = np.from_dlpack(next(iter(scaled))["data"])
    assert b.dtype == np.float32 and b.shape == (4, 3) and (b == 1.0).all()   # uint8 / 255
    with pytest.raises(sluice.UsageError, match="shape=.*holds 4 float32 elements, a sample has 3"):
        sluice.Loader(sluice.npy(tmp_path / "f.npy", shape=(2, 2)))


def test_records_with_a_declared_dtype(recs):
    ld = loader_of(recs, sampler=sluice.sample.sequential())
    b = next(iter(ld))
    assert b["data"].dtype == "uint32" and b["data"].shape == (10, 4)
    assert ids(b) == list(range(10))
    with pytest.raises(sluice.UsageError, match="not a whole number of uint64"):
        sluice.Loader(sluice.records(recs[0], record_bytes=12, dtype="uint64"))


def test_idx_of_multi_byte_elements_is_refused_not_misread(tmp_path):
    import struct
    p = tmp_path / "i16.idx"
    p.write_bytes(struct.pack(">IIII", 0x0B03, 2, 2, 2) + struct.pack(">8h", *range(8)))
    with pytest.raises(sluice.UsageError, match="big-endian"):
        sluice.Loader(sluice.idx(p))
    u8 = tmp_path / "u8.idx"
    u8.write_bytes(struct.pack(">IIII", 0x0803, 3, 2, 5) + bytes(range(30)))
    b = next(iter(sluice.Loader(sluice.idx(u8), sampler=sluice.sample.sequential())))
    assert b["data"].shape == (3, 2, 5)                                       # the file's dimensions


# --- iteration and epochs, as DataLoader ---------------------------------------------------------

def test_iterating_again_is_the_next_epoch_reshuffled(recs):
    ld = loader_of(recs)
    e0 = [i for b in ld for i in ids(b)]
    assert ld.epoch == 1                                    # between epochs: the next one
    e1 = [i for b in ld for i in ids(b)]
    assert sorted(e0) == sorted(e1) == list(range(N)) and e0 != e1
    ref = loader_of(recs)
    ref.set_epoch(1)                                        # DistributedSampler-style code agrees
    assert [i for b in ref for i in ids(b)] == e1


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loop_left_early_checkpoints_where_it_stopped_and_iter_starts_the_next_epoch(recs, workers):
    ld = loader_of(recs, workers=workers)
    seen = []
    for b in ld:
        seen += ids(b)
        if len(seen) == 30:
            break
    st = ld.state_dict()
    assert (st["epoch"], st["position"], ld.epoch) == (0, 30, 0)  # the stopped epoch, as a checkpoint
    resumed = loader_of(recs, workers=2 - workers)
    resumed.load_state_dict(st)
    rest = [i for b in resumed for i in ids(b)]
    assert sorted(seen + rest) == list(range(N))                   # the checkpoint finishes epoch 0
    assert [i for b in ld for i in ids(b)] == [i for b in resumed for i in ids(b)]  # iter(): epoch 1 in both
    again = loader_of(recs, workers=workers)
    it = iter(again)
    first = ids(next(it)) + ids(next(it)) + ids(next(it))
    del it                                                         # the loop left early
    again.load_state_dict(again.state_dict())                      # this process finishes epoch 0 too
    assert sorted(first + [i for b in again for i in ids(b)]) == list(range(N))


def test_iter_is_a_fresh_iterator_and_a_half_used_one_continues(recs):
    ld = loader_of(recs)
    it = iter(ld)
    assert it is not ld and iter(it) is it
    first = [ids(next(it)) for _ in range(3)]
    rest = [ids(b) for b in it]                             # a second `for` over it continues
    assert len(first) + len(rest) == 10
    newer = iter(ld)
    with pytest.raises(sluice.UsageError, match="ended by a later iter"):
        next(it)
    assert sum(1 for _ in newer) == 10


def test_keeping_one_batch_per_step_like_evaluation_code(recs):
    ld = loader_of(recs)                                    # 4 slots of its own (prefetch 2 + 2 workers)
    kept = list(ld)                                         # a whole 10-batch epoch kept
    assert len(kept) == 10 and sorted(i for b in kept for i in ids(b)) == list(range(N))
    assert ld.stats()["slots_grown"] >= 6 and ld.stats()["hold_budget"] == 1 << 30
    targets = []
    for b in ld:                                            # views kept without .clone(), as eval code does
        targets.append(np.from_dlpack(b["label"]))
    assert len(targets) == 10
    del kept
    again = [ids(b) for b in ld]                            # the grown ring serves the next epoch too
    assert sorted(i for b in again for i in b) == list(range(N))


def test_keeping_past_hold_budget_names_the_budget(recs):
    ld = loader_of(recs, workers=1, prefetch=1, hold_budget=0)
    kept = []
    with pytest.raises(sluice.UsageError, match=r"hold_budget = 0 bytes.*Loader\(hold_budget=\.\.\.\)"):
        for b in ld:
            kept.append(b)
    assert len(kept) == 2                                   # the ring's own 2 slots
    per_batch = ld.stats()["batch_bytes"]
    small = loader_of(recs, workers=1, prefetch=1, hold_budget=3 * per_batch)
    with pytest.raises(sluice.UsageError, match="keeps 5 batches.*grew by 3"):
        list(small)
    assert small.stats()["slots_grown"] == 3


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_workers_0_runs_in_the_calling_thread_with_the_same_batches(recs, workers):
    ref = [ids(b) for b in loader_of(recs)]
    ld = loader_of(recs, workers=workers)
    assert [ids(b) for b in ld] == ref
    assert ld.stats()["workers"] == workers
    strict = loader_of(recs, workers=workers, hold_budget=0)  # the loop keeps its previous batch: no growth needed
    assert [ids(b) for b in strict] == ref and strict.stats()["slots_grown"] == 0
    state = None
    for k, b in enumerate(ld):                              # epoch 1, resumed after 4 batches
        if k == 3:
            state = ld.state_dict()
            break
    again = loader_of(recs, workers=workers)
    again.load_state_dict(state)
    again.set_epoch(1)
    full = loader_of(recs, workers=2)
    full.set_epoch(1)
    assert [ids(b) for b in again] == [ids(b) for b in full][4:]


# --- resume, as StatefulDataLoader -----------------------------------------------------------

def full_epoch(recs, e):
    ld = loader_of(recs)
    ld.set_epoch(e)
    return [ids(b) for b in ld]


def test_resume_mid_epoch_with_the_usual_loop(recs):
    want = full_epoch(recs, 2)
    ld = loader_of(recs)
    ld.set_epoch(2)
    it = iter(ld)
    head = [ids(next(it)) for _ in range(4)]
    sd = ld.state_dict()
    assert sd["epoch"] == 2
    new = loader_of(recs)
    new.load_state_dict(sd)
    assert new.epoch == 2                                   # right at once
    tail = []
    for epoch in range(2, 4):                              # the usual loop: set_epoch included
        new.set_epoch(epoch)
        got = [ids(b) for b in new]
        if epoch == 2:
            tail = got
        else:
            assert got == full_epoch(recs, 3)
    assert head + tail == want
    with pytest.raises(sluice.UsageError, match="would discard the resume"):
        again = loader_of(recs)
        again.load_state_dict(sd)
        again.set_epoch(5)


def test_second_resume_within_one_epoch(recs):
    want = full_epoch(recs, 0)
    a = loader_of(recs)
    it = iter(a)
    got = [ids(next(it)) for _ in range(2)]
    b = loader_of(recs)
    b.load_state_dict(a.state_dict())
    it = iter(b)
    got += [ids(next(it)) for _ in range(3)]
    c = loader_of(recs)
    c.load_state_dict(b.state_dict())
    got += [ids(x) for x in c]
    assert got == want


def test_states_at_an_epochs_start_and_end(recs):
    ld = loader_of(recs)
    ld.set_epoch(3)
    sd = ld.state_dict()                                    # before iterating: the start of epoch 3
    r = loader_of(recs)
    r.load_state_dict(sd)
    assert r.epoch == 3 and [ids(b) for b in r] == full_epoch(recs, 3)
    done = loader_of(recs)
    for _ in done:
        pass
    end = done.state_dict()                                 # after epoch 0: the start of epoch 1
    assert end["epoch"] == 1
    r = loader_of(recs)
    r.load_state_dict(end)
    assert [ids(b) for b in r] == full_epoch(recs, 1)
    inside = loader_of(recs)                                # taken inside the loop, at the last batch
    for _ in inside:
        last = inside.state_dict()
    r = loader_of(recs)
    r.load_state_dict(last)
    assert r.epoch == 1 and [ids(b) for b in r] == full_epoch(recs, 1)


# --- close, with, Ctrl-C, del ------------------------------------------------------------------

def test_close_and_with_stop_iteration(recs):
    ld = loader_of(recs)
    it = iter(ld)
    kept = next(it)
    ld.close()
    assert list(it) == []                                   # no more batches after close()
    assert ids(kept)                                        # a batch taken stays valid
    with pytest.raises(sluice.UsageError, match="closed"):
        iter(ld)
    ld.close()                                              # twice is harmless
    with loader_of(recs) as w:
        assert sum(1 for _ in w) == 10
    assert w.closed


def test_state_dict_after_close_says_where_the_loader_stood(recs):
    # A checkpoint written after the `with` block (a finally, a break) resumes where the loop stopped.
    want = [i for b in full_epoch(recs, 0) for i in b]
    with loader_of(recs) as ld:
        for k, b in enumerate(ld):
            if k == 3:
                break
    state = ld.state_dict()
    assert ld.closed and state["epoch"] == 0 and state["position"] == 40  # samples
    fresh = loader_of(recs)
    fresh.load_state_dict(state)
    assert [i for b in fresh for i in ids(b)] == want[40:]
    with loader_of(recs) as done:                           # a whole epoch: the start of the next
        for _ in done:
            pass
    assert done.state_dict()["epoch"] == 1 and done.state_dict()["position"] == 0
    with loader_of(recs) as other:                          # a loaded state not yet iterated stays
        other.load_state_dict(state)
    assert other.state_dict() == state


SLOW = r"""
import os, signal, sys, threading, time, io, tarfile
sys.path.insert(0, sys.argv[1])
import sluice
from PIL import Image
path = os.path.join(sys.argv[2], "big.tar")
with tarfile.open(path, "w") as tar:
    for g in range(96):
        buf = io.BytesIO(); Image.new("RGB", (64, 48), (g, g, g)).save(buf, format="JPEG")
        for name, data in ((f"{g:04d}.jpg", buf.getvalue()), (f"{g:04d}.cls", b"1")):
            info = tarfile.TarInfo(name); info.size = len(data); tar.addfile(info, io.BytesIO(data))
ld = sluice.Loader(sluice.wds(path, decode=sluice.image(size=(1024, 1024))), batch_size=96, workers=int(sys.argv[3]),
                   prefetch=1)
it = iter(ld)
sent = {}
def interrupt():
    time.sleep(0.2)
    sent["t"] = time.perf_counter()
    os.kill(os.getpid(), signal.SIGINT)
threading.Thread(target=interrupt).start()
t0 = time.perf_counter()
try:
    next(it)
    print("batch-first", time.perf_counter() - t0)
except KeyboardInterrupt:
    print("interrupt", time.perf_counter() - sent["t"])
it = iter(ld)
t0 = time.perf_counter()
del it, ld
print("del", time.perf_counter() - t0)
"""


@pytest.mark.parametrize("workers", [1, 0])  # 0: the batch is filled in the trainer's own thread
def test_ctrl_c_reaches_the_trainer_promptly_and_del_returns(tmp_path, workers):
    pytest.importorskip("PIL")
    out = subprocess.run([sys.executable, "-c", SLOW, os.path.dirname(os.path.dirname(sluice.__file__)),
                          str(tmp_path), str(workers)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split() for line in out.stdout.splitlines())
    assert "interrupt" in lines, out.stdout          # the batch takes longer than 0.2 s to make
    assert float(lines["interrupt"]) < 0.5           # about 50 ms; generous for a loaded machine
    assert float(lines["del"]) < 2.0


DAEMON = r"""
import sys, threading, time, numpy as np
sys.path.insert(0, sys.argv[1])
import sluice
np.save(sys.argv[2] + "/big.npy", np.zeros((4000, 1024), np.float32))
ld = sluice.Loader(sluice.npy(sys.argv[2] + "/big.npy"), batch_size=64, workers=int(sys.argv[3]), prefetch=2)
where = sys.argv[4]
started = threading.Event()
def feed():  # a background thread feeding a queue, as trainers write them
    started.set()
    while True:
        for b in ld:
            if where == "kept":
                t = np.asarray(b["data"])  # a view that holds the batch when the program ends
                time.sleep(0.001)
daemon = threading.Thread(target=feed, daemon=True)
daemon.start()
started.wait()
time.sleep(0.05 if where != "exit" else 0.2)
print("main done", flush=True)
"""


# A daemon thread in the loader when the program ends: before Python 3.14 the interpreter ends
# such a thread with pthread_exit where it takes the GIL back, which aborted the process
# ("terminate called without an active exception") from inside sluice's wait for a batch.
@pytest.mark.parametrize("workers,where", [(2, "waiting"), (0, "waiting"), (2, "kept"), (1, "exit")])
def test_a_daemon_thread_iterating_when_the_program_ends_does_not_abort_it(tmp_path, workers, where):
    for _ in range(3):  # the thread is somewhere else in its loop each time
        out = subprocess.run([sys.executable, "-c", DAEMON, os.path.dirname(os.path.dirname(sluice.__file__)),
                              str(tmp_path), str(workers), where], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "main done" in out.stdout and "terminate" not in out.stderr, out.stderr


FORKED = r"""
import os, signal, sys, numpy as np
sys.path.insert(0, sys.argv[1])
import sluice
path, mid = sys.argv[2], sys.argv[3] == "mid"
def loader():
    return sluice.Loader(sluice.records(path, record_bytes=16, dtype="uint32", shape=(4,)), batch_size=1000, workers=2)
def ids(ld):
    return sorted(int(i) for b in ld for i in np.from_dlpack(b["data"])[:, 0])
ld = loader()
it = iter(ld)
first = [int(i) for i in np.from_dlpack(next(it)["data"])[:, 0]]
if not mid:
    rest = [int(i) for b in it for i in np.from_dlpack(b["data"])[:, 0]]
pid = os.fork()
if pid == 0:
    signal.alarm(20)                                 # a hang ends the child with SIGALRM
    for what in ("next", "iter"):                      # the kept iterator, then a new one
        try:
            next(it) if what == "next" else next(iter(ld))
            print("child", what, "gave a batch"); os._exit(3)
        except sluice.UsageError as e:
            assert "forked" in str(e) and str(os.getppid()) in str(e), e
        except StopIteration:
            assert what == "next" and not mid
    assert ids(loader()) == list(range(100000))      # a loader built in the child works
    del it, ld
    sys.exit(0)                                      # destructors and exit handlers run
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
got = sorted(first + ([int(i) for b in it for i in np.from_dlpack(b["data"])[:, 0]] if mid else rest))
print("parent", got == list(range(100000)), ids(ld) == list(range(100000)))
"""


@pytest.mark.parametrize("when", ["mid", "after"])
def test_a_forked_child_is_refused_clearly_and_exits_cleanly(tmp_path, when):
    # fork() after a loader's workers started: the child has none of its threads. Using the loader
    # there is a UsageError; letting it go (del, exit) neither hangs nor crashes; the parent's
    # epoch is whole. The file is large enough (1.6 MB) for the page warmer's thread to start.
    data = np.repeat(np.arange(100000, dtype="<u4")[:, None], 4, axis=1)
    (tmp_path / "d.bin").write_bytes(data.tobytes())
    out = subprocess.run([sys.executable, "-c", FORKED, os.path.dirname(os.path.dirname(sluice.__file__)),
                          str(tmp_path / "d.bin"), when], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["child", "0", "parent", "True", "True"], (out.stdout, out.stderr)


def test_two_threads_iterating_one_loader_the_newest_iterator_gets_its_whole_epoch(recs):
    # Each iter() starts an epoch and ends the iterator before it. A thread still inside next()
    # of the old iterator (waiting for a batch) must not take the new epoch's batch: it gets the
    # UsageError, and the other thread's epoch is whole. Repeated: the race is one of timing.
    import threading
    for _ in range(20):
        ld = loader_of(recs, sampler=sluice.sample.sequential())
        out = {}

        def run(k):
            got = []
            try:
                for b in ld:
                    got += ids(b)
                out[k] = got
            except Exception as e:  # judged below, in this thread
                out[k] = e
        threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(out) == 2, out
        ended = [v for v in out.values() if isinstance(v, Exception)]
        assert all(isinstance(e, sluice.UsageError) and "ended by a later iter(loader)" in str(e) for e in ended), ended
        whole = [v for v in out.values() if not isinstance(v, Exception)]
        assert whole and all(v == list(range(N)) for v in whole), [len(v) for v in whole]


@pytest.mark.parametrize("split", [False, True])
def test_a_loader_wrapped_in_dataloader_workers_warns_that_each_reads_the_epoch(recs, split):
    # An IterableDataset over a Loader with num_workers=2: each DataLoader worker reads the whole
    # epoch, so every sample arrives twice. That is said where it happens; with rank=/world_size=
    # from get_worker_info() the workers split the epoch and nothing is said.
    torch = pytest.importorskip("torch")

    class Wrapped(torch.utils.data.IterableDataset):
        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            kw = dict(rank=info.id, world_size=info.num_workers) if split else {}
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                it = iter(loader_of(recs, **kw))
            yield [(str(w.message), os.path.basename(w.filename)) for w in seen]
            for b in it:
                yield ids(b)

    out = list(torch.utils.data.DataLoader(Wrapped(), batch_size=None, num_workers=2, multiprocessing_context="fork"))
    said = [w for o in out if o and isinstance(o[0], (tuple, list)) for w in o]
    got = sorted(i for o in out if not (o and isinstance(o[0], (tuple, list))) for i in o)
    if split:
        assert said == [] and got == list(range(N))
    else:
        assert got == sorted(list(range(N)) * 2)
        assert len(said) == 2 and all(f == "test_front_door.py" for _, f in said), said
        assert all("each worker reads the whole epoch: every sample arrives 2 times" in m and "rank=info.id" in m
                   for m, _ in said), said


# --- ranks ----------------------------------------------------------------------------------

RANKED = r"""
import sys, numpy as np
sys.path.insert(0, sys.argv[1])
import sluice
kw = eval(sys.argv[3])
ld = sluice.Loader(sluice.records(sys.argv[2], record_bytes=16, dtype="uint32"), batch_size=10, **kw)
print(" ".join(str(int(i)) for b in ld for i in np.from_dlpack(b["data"])[:, 0]))
"""
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                 "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "PMI_RANK", "PMI_SIZE",
                 "PMIX_RANK")


def run_ranked(recs, env_vars, kw="dict(distributed=True)"):
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env.update(env_vars)
    return subprocess.run([sys.executable, "-c", RANKED, os.path.dirname(os.path.dirname(sluice.__file__)), recs[0], kw],
                          env=env, capture_output=True, text=True)


@pytest.mark.parametrize("launcher", [
    lambda r: {"SLURM_PROCID": str(r), "SLURM_NTASKS": "2"},
    lambda r: {"PMI_RANK": str(r), "PMI_SIZE": "2"},
    lambda r: {"RANK": str(r), "WORLD_SIZE": "2"},
], ids=["slurm", "pmi", "torchrun"])
def test_ranks_from_every_launcher_split_the_data(recs, launcher):
    outs = []
    for r in (0, 1):
        p = run_ranked(recs, launcher(r))
        assert p.returncode == 0, p.stderr
        outs.append([int(x) for x in p.stdout.split()])
    assert len(outs[0]) == len(outs[1]) == N // 2 and sorted(outs[0] + outs[1]) == list(range(N))


def test_explicit_ranks_and_partial_environments(recs):
    a = run_ranked(recs, {}, "dict(rank=0, world_size=4)")
    b = run_ranked(recs, {}, "dict(rank=3, world_size=4)")
    assert len(a.stdout.split()) == 25 and not set(a.stdout.split()) & set(b.stdout.split())
    p = run_ranked(recs, {"SLURM_PROCID": "1"})
    assert p.returncode != 0 and "SLURM_PROCID is set but SLURM_NTASKS is not" in p.stderr
    p = run_ranked(recs, {"PMIX_RANK": "1"})
    assert p.returncode != 0 and "PMIX_RANK is set but no world size" in p.stderr
    with pytest.raises(sluice.UsageError, match="rank= is given but world_size= is not"):
        sluice.Loader(sluice.records(recs[0], record_bytes=16), rank=1)
    with pytest.raises(sluice.UsageError, match="rank=4 is not below world_size=4"):
        sluice.Loader(sluice.records(recs[0], record_bytes=16), rank=4, world_size=4)


def test_a_rank_loading_another_ranks_state_is_told_so(recs, monkeypatch):
    # The usual mistake: only rank 0 saves, every rank loads its file. A distributed loader's
    # state says its rank and world size, and loading another rank's is a UsageError naming both.
    a = loader_of(recs, rank=0, world_size=2)
    next(iter(a))
    st = a.state_dict()
    assert (st["rank"], st["world_size"]) == (0, 2)
    with pytest.raises(sluice.UsageError, match=r"saved by rank 0 of 2, and this loader is rank 1 of 2: each rank "
                                                r"resumes from its own state_dict\(\)"):
        loader_of(recs, rank=1, world_size=2).load_state_dict(st)
    with pytest.raises(sluice.UsageError, match=r"saved by rank 0 of 2, and this loader is rank 0 of 4: a state "
                                                r"resumes on the world size it was saved with"):
        loader_of(recs, rank=0, world_size=4).load_state_dict(st)
    for k, v in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(k, v)
    from_env = loader_of(recs, distributed=True)
    with pytest.raises(sluice.UsageError, match=r"saved by rank 0 of 2, and this loader is rank 1 of 2"):
        from_env.load_state_dict(st)
    assert (from_env.state_dict()["rank"], from_env.state_dict()["world_size"]) == (1, 2)
    b = loader_of(recs, rank=0, world_size=2)
    b.load_state_dict(st)                  # its own rank's state resumes
    assert len([1 for _ in b]) == len(a) - 1
    assert "rank" not in loader_of(recs).state_dict()


SPAWNED = r"""
import sys, warnings, numpy as np
sys.path.insert(0, sys.argv[1])
import torch.distributed as dist
import sluice
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[4], rank=int(sys.argv[3]), world_size=2)
try:
    ld = sluice.Loader(sluice.records(sys.argv[2], record_bytes=16, dtype="uint32"), batch_size=10, distributed=True)
    print(" ".join(str(int(i)) for b in ld for i in np.from_dlpack(b["data"])[:, 0]))
except sluice.UsageError as e:
    print("UsageError:", e)
dist.destroy_process_group()
"""


@pytest.mark.parametrize("env_vars", [{}, {"RANK": "0", "WORLD_SIZE": "3"}], ids=["spawned", "disagreeing"])
def test_ranks_from_a_process_group_without_launcher_variables(recs, env_vars):
    # torch.multiprocessing.spawn's DDP: init_process_group(rank=, world_size=) and no RANK/WORLD_SIZE
    # in the environment. Each rank reads its half, never all of it as rank 0 of 1.
    pytest.importorskip("torch.distributed")
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env.update(env_vars)
    procs = [subprocess.Popen([sys.executable, "-c", SPAWNED, os.path.dirname(os.path.dirname(sluice.__file__)), recs[0],
                               str(r), str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in (0, 1)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    if env_vars:
        assert all("process group is rank" in o[0] and "says rank 0 of 3" in o[0] for o in outs), outs
        return
    got = [[int(x) for x in o[0].split()] for o in outs]
    assert len(got[0]) == len(got[1]) == N // 2 and sorted(got[0] + got[1]) == list(range(N))


def test_distributed_without_any_rank_warns_that_it_reads_everything(recs, monkeypatch):
    for k in LAUNCHER_VARS:
        monkeypatch.delenv(k, raising=False)
    with pytest.warns(UserWarning, match=r"no launcher set this process's rank .* it reads every sample") as w:
        sluice.Loader(sluice.records(recs[0], record_bytes=16), distributed=True)
    assert w[0].filename == __file__  # the warning names the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sluice.Loader(sluice.records(recs[0], record_bytes=16), distributed=True, rank=0, world_size=1)


# --- keywords and errors -------------------------------------------------------------------

def test_keywords_that_do_not_apply_are_type_errors_naming_where_they_apply(recs):
    with pytest.raises(TypeError, match="did you mean 'record_bytes'"):
        sluice.records(recs[0], record_byte=16)
    with pytest.raises(TypeError, match=r"'offsets' applies to sluice.documents\(\)"):
        sluice.records(recs[0], record_bytes=16, offsets="x")
    with pytest.raises(TypeError, match="DataLoader's num_workers: in sluice, workers="):
        sluice.Loader(sluice.records(recs[0], record_bytes=16), num_workers=4)
    with pytest.raises(TypeError, match="'decode' applies to"):
        sluice.loader("npy", path="x.npy", decode=None)
    with pytest.raises(TypeError, match="vocab"):
        sluice.loader("wds", path="x.tar", size=(8, 8), vocab=3)
    with pytest.raises(sluice.UsageError, match="mean=/std= normalise float32 output"):
        sluice.records(recs[0], record_bytes=16, mean=0.5)


def test_dataloader_habits_in_calls_get_errors_in_sluices_words(recs):
    src = sluice.records(recs[0], record_bytes=16)
    with pytest.raises(TypeError, match=r"source positionally and its settings by keyword: sluice.Loader\(source, "
                                        r"batch_size=32"):
        sluice.Loader(src, 32)                               # DataLoader(dataset, 32)
    with pytest.raises(TypeError, match="DataLoader's dataset: in sluice, the source, Loader's first argument"):
        sluice.Loader(dataset=src, batch_size=4)
    with pytest.raises(TypeError) as e:                      # not max_workers, an unrelated setting
        sluice.Loader(src, num_workers=2)
    assert "did you mean" not in str(e.value) and "workers=" in str(e.value)
    with pytest.raises(TypeError, match="multiprocessing_context: in sluice, nothing: workers are C"):
        sluice.Loader(src, multiprocessing_context="fork")
    with pytest.raises(sluice.UsageError, match=r"sample weight 0 is inf: a weight must be finite and >= 0"):
        sluice.Loader(src, sampler=sluice.sample.weighted([float("inf")] + [1.0] * (N - 1)))
    with pytest.raises(sluice.UsageError, match=r"one weight per sample \(100\), got 99 \(sluice.sample.weighted"):
        sluice.Loader(src, sampler=sluice.sample.weighted([1.0] * (N - 1)))
    ld = loader_of(recs)
    with pytest.raises(sluice.UsageError, match="epoch=-1 is not accepted"):
        ld.epoch_stats(-1)
    with pytest.raises(sluice.UsageError, match="takes the dict state_dict\\(\\) returned, not a NoneType"):
        ld.load_state_dict(None)
    next(iter(ld))
    with pytest.raises(sluice.UsageError, match=r"augmentation seed differs \(state 0, loader 4\): build the loader "
                                                r"with seed 0 \(C\+\+: loader_options::seed; Python: seed=\)"):
        loader_of(recs, seed=4).load_state_dict(ld.state_dict())


def test_dataloader_habits_in_attributes_sampler_set_epoch_and_attribute_hints(recs):
    import pickle
    s = sluice.sample.shuffle(seed=3)
    with pytest.raises(sluice.UsageError, match=r"no Loader uses this sampler; .* call loader.set_epoch\(epoch\)"):
        s.set_epoch(1)
    ld, ref = loader_of(recs, sampler=s), loader_of(recs)
    assert (ld.batch_size, ld.drop_last, ld.workers) == (10, False, 2)
    assert ld.sampler is s
    for epoch in (5, 2):                     # the DistributedSampler loop: loader.sampler.set_epoch(epoch)
        ld.sampler.set_epoch(epoch)
        ref.set_epoch(epoch)
        got = [ids(b) for b in ld]
        assert ld.epoch == epoch + 1
        assert got == [ids(b) for b in ref]
        assert got != [ids(b) for b in loader_of(recs)]  # epoch 0's order is another
    copy = pickle.loads(pickle.dumps(s))     # a description: it pickles without its loaders
    assert repr(copy) == repr(s)
    with pytest.raises(sluice.UsageError, match="no Loader uses this sampler"):
        copy.set_epoch(1)
    with pytest.raises(AttributeError, match=r"DataLoader's num_workers: in sluice, loader.workers"):
        ld.num_workers
    with pytest.raises(AttributeError, match=r"DataLoader's dataset: in sluice, loader.source"):
        len(ld.dataset)
    with pytest.raises(AttributeError, match=r"DataLoader's collate_fn: in sluice, a source's own collate"):
        ld.collate_fn
    assert not hasattr(ld, "no_such_thing") and not hasattr(ld, "dataset")
    with pytest.raises(TypeError, match=r"a sluice Loader is itself the DataLoader .* iterate it"):
        ld[0]                                # what torch.utils.data.DataLoader(loader) asks first
    del ld
    import gc
    gc.collect()
    with pytest.raises(sluice.UsageError, match="no Loader uses this sampler"):
        s.set_epoch(3)


def test_mean_and_std_are_checked_when_given_not_at_the_first_batch(recs, tmp_path):
    rec = lambda **kw: sluice.records(recs[0], record_bytes=16, output="float32", **kw)  # noqa: E731
    img = lambda **kw: sluice.wds(tmp_path / "x.tar", decode=sluice.image(size=(8, 8)), output="float32", **kw)  # noqa: E731
    for call, words in [
        (lambda: rec(mean=[float("nan")]), r"mean=\[nan\] is not accepted; every value must be finite"),
        (lambda: rec(std=[float("inf")]), "std=.* every value must be finite"),
        (lambda: rec(std=[0.0]), "std=.* every value must be above zero"),
        (lambda: rec(std=-1.0), "every value must be above zero"),
        (lambda: rec(mean=[0.1, 0.2], std=[0.1, 0.2, 0.3]), "mean= has 2 values and std= has 3"),
        (lambda: img(mean=[0.1, 0.2], std=0.5), "2 values for 3 channels"),
        (lambda: img(mean=[0.1, 0.2, 0.3, 0.4, 0.5]), "5 values for 3 channels"),
        # 0-255 values where pixels are scaled to [0, 1] first: ImageNet's, and mmcv's std 255.
        (lambda: img(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375]),
         r"mean=\[123.675, 116.28, 103.53\] is not accepted: sluice scales uint8 pixels to \[0, 1\] before "
         r"normalising .* give mean=\[0.485, 0.456, 0.406\]"),
        (lambda: img(mean=[0.485, 0.456, 0.406], std=[58.395, 57.12, 57.375]), r"give std=\[0.229, 0.224, 0.225\]"),
        (lambda: rec(mean=0.0, std=255.0), r"std=\[255.0\] is not accepted.* give std=\[1.0\]"),
        (lambda: rec(mean=-0.5), r"mean=\[-0.5\] is not accepted"),
        (lambda: sluice.normalized(mean=[124.0, 116.0, 104.0]), "sluice.normalized: mean=.* look like 0-255 values"),
    ]:
        with pytest.raises(sluice.UsageError, match=words):
            call()
    # Records: a per-channel count must divide the sample's elements (16 bytes: 5 channels do not).
    with pytest.raises(sluice.UsageError, match="a sample holds 16 elements, not a whole number of 5-channel pixels"):
        sluice.Loader(rec(mean=[0.1, 0.2, 0.3, 0.4, 0.5]))
    # One value for all, or one per channel that divides the sample: accepted.
    sluice.Loader(rec(mean=0.5, std=[0.25]), workers=0).close()
    sluice.Loader(rec(mean=[0.1, 0.2, 0.3, 0.4], std=0.5), workers=0).close()
    sluice.Loader(rec(mean=[0.0, 1.0], std=[1.0, 0.01]), workers=0).close()  # the bounds themselves


def test_torch_tensor_habits_on_a_batch_say_where_the_methods_are(recs):
    t = next(iter(loader_of(recs)))["data"]
    for name in ("to", "numpy", "float", "cuda"):
        with pytest.raises(AttributeError, match=rf"no attribute '{name}': .* torch.from_dlpack\(t\) \(no copy\)"):
            getattr(t, name)
    assert not hasattr(t, "__array_interface__") and not hasattr(t, "_private")


def test_truth_length_and_equality_answer_as_numpy_and_torch_do(recs):
    b = next(iter(loader_of(recs, sampler=sluice.sample.sequential())))
    labels = b["label"]  # ten labels, 0 1 2 3 4 0 1 2 3 4
    assert len(labels) == 10
    with pytest.raises(ValueError, match="truth value of a sluice.Tensor of 10 elements is ambiguous"):
        bool(labels)
    with pytest.raises(ValueError, match="ambiguous"):
        if labels:
            pass
    one = [b["label"] for b in loader_of(recs, batch_size=1, sampler=sluice.sample.sequential(), workers=0)][:2]
    assert [bool(t) for t in one] == [False, True]  # labels 0 and 1: the value decides, not the length
    for eq in (lambda: labels == 3, lambda: labels != 3, lambda: labels == labels):
        with pytest.raises(TypeError, match="does not compare with ==; take it with torch.from_dlpack"):
            eq()
    assert len({labels, labels}) == 1  # still hashable, by identity


def test_a_batch_pickles_and_deep_copies_as_numpy_arrays_of_its_values(recs):
    import copy
    import pickle
    b = next(iter(loader_of(recs)))
    want = {k: np.array(v) for k, v in b.items()}
    for got in (pickle.loads(pickle.dumps(b)), copy.deepcopy(b)):
        assert set(got) == set(want)
        for k in want:
            assert isinstance(got[k], np.ndarray) and got[k].dtype == want[k].dtype
            assert np.array_equal(got[k], want[k])
            assert got[k].ctypes.data != b[k].data_ptr  # a copy, not the ring's memory


def test_integers_from_numpy_and_torch_are_taken_as_ints(recs):
    # A config computation gives numpy.int64 (or a 0-d torch tensor); range() takes them, so does sluice.
    ld = sluice.Loader(sluice.records(recs[0], record_bytes=16, dtype="uint32", shape=np.array([2, 2])),
                       batch_size=np.int64(10), workers=np.int32(1), sampler=sluice.sample.shuffle(seed=np.uint64(3)))
    assert (ld.batch_size, type(ld.batch_size), ld.workers) == (10, int, 1)
    assert ld.sampler.seed == 3 and type(ld.sampler.seed) is int
    assert next(iter(ld))["data"].shape == (10, 2, 2)
    assert sluice.image(size=224).size == (224, 224) and sluice.image(size=np.array([32, 64])).size == (32, 64)
    with pytest.raises(sluice.UsageError, match="not a bool"):
        sluice.Loader(sluice.records(recs[0], record_bytes=16), batch_size=np.True_)


def test_bad_values_are_usage_errors_and_every_error_is_a_sluice_error(recs):
    for call, words in [
        (lambda: sluice.Loader(sluice.records(recs[0], record_bytes=16), batch_size=0), "batch_size=0"),
        (lambda: sluice.Loader(sluice.records(recs[0], record_bytes=16), workers=0, max_workers=2), "workers=0"),
        (lambda: sluice.Loader(sluice.records(recs[0], record_bytes=16), hold_budget=-1), "hold_budget=-1"),
        (lambda: sluice.Loader(sluice.records(recs[0], record_bytes=16), hold_budget=1 << 70), "hold_budget="),
        (lambda: sluice.image(size=(0, 4)), "size="),
        (lambda: sluice.records(recs[0], record_bytes=16, shape=(-1, 4)), r"shape=\(-1, 4\) is not accepted"),
        (lambda: sluice.npy(recs[0], shape=[4, 0]), r"shape=\(4, 0\) is not accepted"),
        (lambda: sluice.image(size=(4, 4), crop="middle"), "crop='middle'"),
        # Numbers that are not integers are refused, never truncated or read as characters.
        (lambda: sluice.Loader(sluice.records(recs[0], record_bytes=16), batch_size=4.0), "batch_size=4.0 .* not a float"),
        (lambda: sluice.npy(recs[0], shape="28"), r"shape='28' is not accepted"),
        (lambda: sluice.npy(recs[0], shape=(2.5, 4)), r"shape=\(2.5, 4\) is not accepted"),
        (lambda: sluice.image(size=(224.5, 224)), r"size=\(224.5, 224\) is not accepted"),
        (lambda: sluice.stack(shape="4"), r"shape='4' is not accepted"),
        (lambda: sluice.sample.shuffle(seed=1 << 63), r"seed=9223372036854775808 is not accepted"),
        (lambda: sluice.sample.class_balanced("sqrt"), "rule='sqrt'"),
        (lambda: sluice.Loader(sluice.records(recs[0], record_bytes=16), sampler=sluice.sample.class_balanced()),
         "needs labels"),
    ]:
        with pytest.raises(sluice.UsageError, match=words) as e:
            call()
        assert isinstance(e.value, ValueError) and isinstance(e.value, sluice.Error)
    with pytest.raises(sluice.IOError) as e:
        sluice.Loader(sluice.records(recs[0] + ".missing", record_bytes=16))
    assert isinstance(e.value, OSError) and isinstance(e.value, sluice.Error)
    assert sluice.Error.__module__ == "sluice"


def test_files_other_tools_write_where_one_is_expected_are_named(tmp_path):
    # A glob or a folder for shards, an .npz or a torch.save file for an .npy: each says what it is.
    (tmp_path / "shards").mkdir()
    for call, words in [
        (lambda: sluice.wds(str(tmp_path / "shards" / "*.tar")),
         r"is a glob pattern, which sluice does not expand .* path=sorted\(glob.glob\("),
        (lambda: sluice.tfrecord(str(tmp_path / "shards" / "train-0000[0-3].tfrecord")), "is a glob pattern"),
        (lambda: sluice.wds(tmp_path / "shards"), r"is a folder; give its shards, e.g. path=sorted\(glob.glob\('.*\*.tar'\)\)"),
        # Remote shards as webdataset and Streaming users name them: a URL, never "no such file".
        (lambda: sluice.wds("https://example.com/train-{0000..0009}.tar"), r"path='https://example.com/.*' is a URL; "
                                                                          r"sluice's Python sources read local files"),
        (lambda: sluice.wds(["s3://bucket/a.tar", "s3://bucket/b.tar"]), r"path\[0\]='s3://bucket/a.tar' is a URL"),
        (lambda: sluice.wds("pipe:curl -s https://example.com/a.tar"), "is a webdataset pipe; .* download"),
        (lambda: sluice.mds("gs://bucket/mds"), "path='gs://bucket/mds' is a URL"),
        (lambda: sluice.npy("hf://datasets/x/y.npy"), "is a URL"),
    ]:
        with pytest.raises(sluice.UsageError, match=words):
            call()
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.savez(tmp_path / "a.npz", x=x)
    with pytest.raises(sluice.FormatError, match=r"a zip archive, not an .npy file \(numpy.savez"):
        sluice.Loader(sluice.npy(tmp_path / "a.npz"), workers=0)
    import pickle
    (tmp_path / "p.npy").write_bytes(pickle.dumps(x, protocol=4))
    with pytest.raises(sluice.FormatError, match="a Python pickle, not an .npy file"):
        sluice.Loader(sluice.npy(tmp_path / "p.npy"), workers=0)
    # An .npy where flat values are read: its header would be taken as the first values.
    np.save(tmp_path / "tok.npy", np.arange(1000, dtype=np.uint16))
    with pytest.raises(sluice.FormatError, match=r"an .npy file \(numpy.save; shape \(1000,\)\), not a flat token file "
                                                 r".* numpy.load\(FILE\).astype\(numpy.uint16\).tofile\(OUT\)"):
        sluice.Loader(sluice.tokens(tmp_path / "tok.npy", length=16), workers=0)
    # uint32 ids (a 100k vocabulary) written with tofile, read with the default dtype='uint16'.
    np.random.default_rng(0).integers(0, 100277, 4096).astype(np.uint32).tofile(tmp_path / "tok32.bin")
    with pytest.raises(sluice.FormatError, match=r"every second uint16 token .* is below 8, as when uint32 tokens are read "
                                                 r"as uint16: .* dtype=\"uint32\""):
        sluice.Loader(sluice.tokens(tmp_path / "tok32.bin", length=16), workers=0)
    w = sluice.Loader(sluice.tokens(tmp_path / "tok32.bin", length=16, dtype="uint32"), workers=0, batch_size=2)
    assert np.asarray(next(iter(w))["input"]).dtype == np.uint32
    np.save(tmp_path / "x.npy", x)
    with pytest.raises(sluice.FormatError, match=r"shape \(4, 3\)\), not raw records: .* header_bytes = 128"):
        sluice.Loader(sluice.records(tmp_path / "x.npy", record_bytes=12), workers=0)
    ok = sluice.Loader(sluice.records(tmp_path / "x.npy", record_bytes=12, header_bytes=128, dtype="float32", shape=(3,)),
                       workers=0, sampler=sluice.sample.sequential(), batch_size=4)
    assert np.array_equal(np.asarray(next(iter(ok))["data"]), x)


def test_sluice_pack_comes_with_the_package(tmp_path):
    from sluice import _pack
    if _pack.path() is None:
        pytest.skip("this sluice package was built without sluice-pack (SLUICE_BUILD_TOOLS=OFF)")
    x = (np.arange(6 * 4 * 5) % 251).astype(np.uint8).reshape(6, 4, 5)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", np.arange(6) % 3)
    out = tmp_path / "x.sluice"
    r = subprocess.run([sys.executable, "-m", "sluice._pack", "npy", str(tmp_path / "x.npy"), "--labels",
                        str(tmp_path / "y.npy"), "-o", str(out), "-q"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    b = next(iter(sluice.Loader(sluice.shard(out, shape=(4, 5)), batch_size=6, workers=0,
                                sampler=sluice.sample.sequential())))
    assert np.array_equal(np.asarray(b["data"]), x) and np.asarray(b["label"]).tolist() == [0, 1, 2, 0, 1, 2]
    # pip's console script, where the package was installed by pip (not in the build tree).
    if "site-packages" in sluice.__file__:
        import sysconfig
        script = os.path.join(sysconfig.get_path("scripts"), "sluice-pack")
        assert os.path.exists(script), f"pip installed sluice without its sluice-pack script ({script})"
        r = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "imagefolder DIR" in r.stdout + r.stderr


def test_help_documents_what_it_says():
    assert "npy" in sluice.__doc__ and "state_dict" in sluice.__doc__
    for f in (sluice.records, sluice.npy, sluice.wds, sluice.tokens, sluice.documents, sluice.image, sluice.Loader,
              sluice.sample.shuffle, sluice.loader):
        assert f.__doc__ and len(f.__doc__) > 80, f
    import inspect
    assert "record_bytes" in str(inspect.signature(sluice.records))


# --- DLPack -----------------------------------------------------------------------------------

def capsule_name(cap):
    get = ctypes.pythonapi.PyCapsule_GetName
    get.restype, get.argtypes = ctypes.c_char_p, [ctypes.py_object]
    return get(cap).decode()


class Holder:
    """Hands numpy a capsule made with the given __dlpack__ keywords (numpy < 2 passes none)."""

    def __init__(self, t, **kw):
        self.t, self.kw = t, kw

    def __dlpack__(self, stream=None, **_):
        return self.t.__dlpack__(**self.kw)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def test_dlpack_versioned_legacy_copy_device_and_stream(recs):
    b = next(iter(loader_of(recs, sampler=sluice.sample.sequential())))
    t = b["data"]
    assert capsule_name(t.__dlpack__()) == "dltensor"
    assert capsule_name(t.__dlpack__(max_version=(0, 8))) == "dltensor"
    assert capsule_name(t.__dlpack__(max_version=(1, 0))) == "dltensor_versioned"
    view = np.from_dlpack(Holder(t))
    copy = np.from_dlpack(Holder(t, copy=True))
    assert view.ctypes.data == t.data_ptr and copy.ctypes.data != t.data_ptr
    assert (copy == view).all()
    ctypes.memset(t.data_ptr + 3 * 16, 0xFF, 4)               # write the batch: the copy keeps its value
    assert view[3, 0] == 0xFFFFFFFF and copy[3, 0] == 3
    with pytest.raises(BufferError, match="CPU tensor has no stream"):
        t.__dlpack__(stream=1)
    with pytest.raises(BufferError, match="does not copy across devices"):
        t.__dlpack__(dl_device=(2, 0))
    assert capsule_name(t.__dlpack__(dl_device=(1, 0), copy=False)) == "dltensor"


def test_numpy_asarray_and_array_see_the_batch(recs):
    # numpy.asarray does not look for __dlpack__: before __array__ it made a 0-d object array.
    b = next(iter(loader_of(recs, sampler=sluice.sample.sequential())))
    t = b["data"]
    view = np.asarray(t)
    assert view.shape == (10, 4) and view.dtype == np.uint32
    assert view.ctypes.data == t.data_ptr and view[:, 0].tolist() == list(range(10))
    copy = np.array(t)                                          # numpy.array copies by default
    assert copy.ctypes.data != t.data_ptr and (copy == view).all()
    f = np.asarray(t, dtype=np.float64)
    assert f.dtype == np.float64 and (f == view).all()
    if int(np.__version__.split(".")[0]) >= 2:
        with pytest.raises(ValueError, match="needs a copy"):
            np.asarray(t, dtype=np.float32, copy=False)
        assert np.asarray(t, copy=False).ctypes.data == t.data_ptr
    del b, t
    assert view[:, 0].tolist() == list(range(10))              # the view keeps its batch alive


def test_numpy_2_takes_versioned_capsules(recs):
    if int(np.__version__.split(".")[0]) < 2:
        pytest.skip(f"numpy {np.__version__} predates the versioned protocol (the numpy-2 venv runs this)")
    b = next(iter(loader_of(recs, sampler=sluice.sample.sequential())))
    x = np.from_dlpack(b["data"])                             # numpy 2 asks for max_version=(1, 0)
    assert x.ctypes.data == b["data"].data_ptr and x[:, 0].tolist() == list(range(10))
    c = np.from_dlpack(b["data"], copy=True)
    assert c.ctypes.data != b["data"].data_ptr and (c == x).all()
    assert np.from_dlpack(b["data"], device="cpu").shape == (10, 4)
