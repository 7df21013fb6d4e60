"""Toy checkpoint writers for `crash-test`'s own tests (system python3, no torch).

    python3 writer.py MODE VALUE    # writes ./ckpt holding "value=VALUE" and a body
    python3 writer.py check         # exit 0 iff ./ckpt is whole and VALUE is 1 or 2

Modes: `atomic` (temp file, fsync, rename, directory fsync: correct), `no-fsync` (the
same without the file fsync), `remove-first` (removes the old checkpoint before the
rename, like torch 2.13's FileSystemWriter.finish), `in-place` (truncates and rewrites
the checkpoint, then fsyncs), `threads` (two threads and a child process write the parts
of a three-file checkpoint, each fsynced and renamed, then the directory fsynced),
`rewrite-same` (truncates ./ckpt and writes the same bytes again, no fsync, then creates
./rewritten).
"""
import os
import subprocess
import sys
import threading

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
    elif mode == "part":
        part(sys.argv[2], sys.argv[3])
    else:
        print(f"unknown mode {mode}")
        return 2
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


if __name__ == "__main__":
    if sys.argv[1] == "check":
        sys.exit(check())
    if sys.argv[1] == "part":
        part(sys.argv[2], sys.argv[3])
        sys.exit(0)
    sys.exit(save(sys.argv[1], sys.argv[2]))
