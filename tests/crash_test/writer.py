"""Toy checkpoint writers for `crash-test`'s own tests (system python3, no torch).

    python3 writer.py MODE VALUE    # writes ./ckpt holding "value=VALUE" and a body
    python3 writer.py check         # exit 0 iff ./ckpt is whole and VALUE is 1 or 2
    python3 writer.py overlap ROUNDS   # see below; checked by `check-overlap`

Modes: `atomic` (temp file, fsync, rename, directory fsync: correct), `no-fsync` (the
same without the file fsync), `remove-first` (removes the old checkpoint before the
rename, like torch 2.13's FileSystemWriter.finish), `in-place` (truncates and rewrites
the checkpoint, then fsyncs), `threads` (two threads and a child process write the parts
of a three-file checkpoint, each fsynced and renamed, then the directory fsynced),
`rewrite-same` (truncates ./ckpt and writes the same bytes again, no fsync, then creates
./rewritten), `ack` (`atomic`, then prints `committed VALUE` and creates ./after-ack
without any fsync), `ack-early` (`atomic`, but prints `committed VALUE` before the rename
and the directory fsync: an acknowledgement before the work is durable).

    python3 writer.py check-acked   # `check`, and VALUE must be 2 once SHARDLIFT_ACKED > 0

`overlap`: the main thread renames `b-R.tmp` to `b-R` while a second thread is inside
sync(2), then creates `synced-R` once that sync has returned, as if the sync had made the
rename durable. The main thread watches the other in /proc (syscall number and state) so
the rename is known to have completed after the recorder saw the sync's entry (the thread
was past its entry stop, not in a tracing stop) and before its exit (the thread was still
inside sync afterwards); a round where that cannot be shown is repeated, up to ROUNDS.
Dirty pages in $TMPDIR (not modelled) make the sync wait for writeback meanwhile.
`check-overlap` fails a state holding `synced-R` without `b-R`.
"""
import os
import subprocess
import sys
import threading

SYS_SYNC = "162"  # x86_64 sync(2), as /proc/TID/syscall prints it
DIRTY = 16 << 20  # bytes of dirty pages the sync must write back
BODY = 3000  # bytes: longer than one 512-byte sector


def payload(value):
    line = f"value={value}\n".encode()
    return line + bytes([48 + int(value)]) * BODY + b"\nend\n"


def fsync_dir(path="."):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path, data, sync=True):
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        if sync:
            os.fsync(f.fileno())


def part(name, value):
    write_file(name + ".tmp", payload(value))
    os.rename(name + ".tmp", name)


def save(mode, value):
    data = payload(value)
    if mode == "atomic":
        write_file("ckpt.tmp", data)
        os.rename("ckpt.tmp", "ckpt")
        fsync_dir()
    elif mode == "no-fsync":
        write_file("ckpt.tmp", data, sync=False)
        os.rename("ckpt.tmp", "ckpt")
        fsync_dir()
    elif mode == "remove-first":
        write_file("ckpt.tmp", data)
        if os.path.exists("ckpt"):
            os.remove("ckpt")
        os.rename("ckpt.tmp", "ckpt")
        fsync_dir()
    elif mode == "in-place":
        write_file("ckpt", data)
        fsync_dir()
    elif mode == "threads":
        threads = [threading.Thread(target=part, args=(n, value)) for n in ("part-a", "part-b")]
        for t in threads:
            t.start()
        child = subprocess.run([sys.executable, __file__, "part", "part-c", value])
        for t in threads:
            t.join()
        fsync_dir()
        return child.returncode
    elif mode == "rewrite-same":
        write_file("ckpt", data, sync=False)
        # A later entry: a state holding it was cut after the rewrite had completed.
        open("rewritten", "wb").close()
    elif mode == "ack":
        write_file("ckpt.tmp", data)
        os.rename("ckpt.tmp", "ckpt")
        fsync_dir()
        print(f"committed {value}", flush=True)
        open("after-ack", "wb").close()
    elif mode == "ack-early":
        write_file("ckpt.tmp", data)
        print(f"committed {value}", flush=True)
        os.rename("ckpt.tmp", "ckpt")
        fsync_dir()
    elif mode == "part":
        part(sys.argv[2], sys.argv[3])
    else:
        print(f"unknown mode {mode}")
        return 2
    return 0


def task_syscall(tid):
    """The system call `tid` is stopped or blocked in ("running" or a number)."""
    try:
        with open(f"/proc/self/task/{tid}/syscall") as f:
            return f.read().split()[0]
    except (OSError, IndexError):
        return "gone"


def task_state(tid):
    try:
        with open(f"/proc/self/task/{tid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"


def overlap_round(r):
    """One attempt; whether the rename completed inside the other thread's sync."""
    write_file(f"b-{r}.tmp", payload(r), sync=False)
    syncer = {}
    entering = threading.Event()
    returned = threading.Event()

    def sync_thread():
        syncer["tid"] = threading.get_native_id()
        with open(os.path.join(os.environ["TMPDIR"], "dirty"), "wb") as f:
            f.write(b"\0" * DIRTY)
        entering.set()
        os.sync()
        returned.set()

    thread = threading.Thread(target=sync_thread)
    thread.start()
    entering.wait()
    tid = syncer["tid"]
    # Inside sync and past the entry stop: the recorder has stamped the sync's entry.
    while not returned.is_set():
        if task_syscall(tid) == SYS_SYNC and task_state(tid) not in ("t", "gone"):
            break
    os.rename(f"b-{r}.tmp", f"b-{r}")
    # Still inside sync once the rename returned: its exit had not been recorded yet.
    overlapped = task_syscall(tid) == SYS_SYNC
    thread.join()
    if overlapped:
        open(f"synced-{r}", "wb").close()
    return overlapped


def overlap(rounds):
    for r in range(1, int(rounds) + 1):
        if overlap_round(r):
            print(f"the rename of round {r} overlapped the sync")
            return 0
    print(f"no rename overlapped the sync in {rounds} rounds")
    return 3


def check_overlap():
    for name in sorted(os.listdir(".")):
        if name.startswith("synced-") and not os.path.exists("b-" + name[len("synced-"):]):
            print(f"{name} without b-{name[len('synced-'):]}: the sync did not cover it")
            return 1
    print("consistent")
    return 0


def check():
    names = [n for n in ("ckpt", "part-a", "part-b", "part-c") if os.path.exists(n)]
    if not names:
        print("no checkpoint")
        return 1
    values = set()
    for name in names:
        with open(name, "rb") as f:
            data = f.read()
        if data not in (payload(1), payload(2)):
            print(f"{name}: damaged ({len(data)} bytes)")
            return 1
        values.add(data)
    if len(values) > 1:
        print("parts from different checkpoints")
        return 1
    print("whole")
    return 0


def check_acked():
    status = check()
    if status != 0:
        return status
    acked = int(os.environ.get("SHARDLIFT_ACKED", "0"))
    with open("ckpt", "rb") as f:
        data = f.read()
    if acked > 0 and data != payload(2):
        print(f"acknowledged checkpoint lost ({acked} acknowledgements)")
        return 1
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "check":
        sys.exit(check())
    if sys.argv[1] == "check-acked":
        sys.exit(check_acked())
    if sys.argv[1] == "check-overlap":
        sys.exit(check_overlap())
    if sys.argv[1] == "overlap":
        sys.exit(overlap(sys.argv[2]))
    if sys.argv[1] == "part":
        part(sys.argv[2], sys.argv[3])
        sys.exit(0)
    sys.exit(save(sys.argv[1], sys.argv[2]))
