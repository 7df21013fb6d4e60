"""A torch-free trainer that speaks the resume-test line protocol itself (no probe module).

Its "model" is one integer advanced by a hash each step; it checkpoints every second
step (temp file, fsync, rename, directory fsync) and resumes from the checkpoint.
The mode (argv[1]) makes it correct or broken in one named way:

  correct         resumes exactly
  forget-rng      does not save its RNG state (the restart reseeds it)
  skip-step       resumes one step past its checkpoint
  no-probe        never reports a record
  garbage         writes a line that is not a record
  fail            exits 3 before any step
  hang-restart    a restart (a checkpoint exists) starts a helper in its own session
                  and hangs
"""
import hashlib
import json
import os
import random
import subprocess
import sys
import time

STEPS = 8
MODE = sys.argv[1]
CHECKPOINT = "state.json"
channel = os.environ.get("SHARDLIFT_PROBE")
fd = os.open(channel, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600) if channel else None


def emit(record):
    if fd is None or MODE == "no-probe":
        return
    record.update({"v": 1, "rank": 0, "world": 1})
    os.write(fd, (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode())


def digest(value):
    return hashlib.sha256(repr(value).encode()).hexdigest()


def save(step, x, rng_state):
    emit({"kind": "saving", "step": step})
    data = {"step": step, "x": x}
    if MODE != "forget-rng":
        data["rng"] = [rng_state[0], list(rng_state[1]), rng_state[2]]
    with open(CHECKPOINT + ".tmp", "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(CHECKPOINT + ".tmp", CHECKPOINT)
    dir_fd = os.open(".", os.O_RDONLY)
    os.fsync(dir_fd)
    os.close(dir_fd)
    emit({"kind": "saved", "step": step})


def main():
    if MODE == "fail":
        sys.exit(3)
    if MODE == "garbage":
        os.write(fd, b"this is not a record\n")
    rng = random.Random(7)
    x, start = 1, 1
    if os.path.exists(CHECKPOINT):
        if MODE == "hang-restart":
            # The working directory as an argument marks the helper for the test.
            helper = [sys.executable, "-c", "import time; time.sleep(600)", os.getcwd()]
            subprocess.Popen(helper, start_new_session=True)
            time.sleep(600)
        with open(CHECKPOINT) as f:
            data = json.load(f)
        x, start = data["x"], data["step"] + 1
        if "rng" in data:
            rng.setstate((data["rng"][0], tuple(data["rng"][1]), data["rng"][2]))
        if MODE == "skip-step":
            start += 1
    hold = os.environ.get("SHARDLIFT_PROBE_HOLD_AFTER_STEP")
    for step in range(start, STEPS + 1):
        noise = rng.getrandbits(32)
        x = int(hashlib.sha256(f"{x}:{step}:{noise}".encode()).hexdigest()[:16], 16)
        time.sleep(0.02)
        emit({"kind": "step", "step": step, "components": {"param.x": digest(x), "rng.python": digest(rng.getstate())}})
        if hold is not None and int(hold) == step:
            while True:
                time.sleep(3600)
        if step % 2 == 0:
            save(step, x, rng.getstate())


main()
