"""The Python side of `shardlift bench checkpoint`: what a PyTorch user would pick.

Runs as one long-lived process driven by `shardlift bench checkpoint` over stdin and
stdout, one JSON object per line each way, so that its saves and loads interleave with
the disk's and ShardLift's in one run. Standard library, torch and safetensors only.

Requests (each answered by one line, {"ok": true, ...} or {"ok": false, "error": ...}):

- {"op": "hello"}: the torch and safetensors versions.
- {"op": "state", "layout": PATH, "data": PATH}: reads the state (a layout JSON list of
  {"name", "elements", "offset"} and the raw little-endian FP32 bytes) into tensors, untimed.
- {"op": "save", "format": F, "path": P}: saves the state; F is `dcp` (the default
  FileSystemWriter with sync_files=True, single process), `torch` (torch.save, then an
  fsync of the file and of its directory) or `safetensors` (save_file, then the same
  fsyncs). Answers seconds and the bytes of the files written.
- {"op": "load", "format": F, "path": P}: loads it back (DCP into the held state dict in
  place, as a training job does; torch.load with weights_only; safetensors load_file),
  timed until one byte of every page of every tensor was read (load_file maps the file),
  then checks every tensor equals the state bit for bit (untimed).
- {"op": "reshard", "from": P, "to": Q, "ranks": N}: what a DCP user does to move a
  checkpoint to N ranks: DCP load, then DCP save into Q with one file per rank
  (FileSystemWriter's thread_count = N: one process writes the N ranks' files). Timed
  together; answers the bytes written under Q.
- {"op": "exit"}.
"""

import json
import os
import sys
import time
import warnings

import torch
import torch.distributed.checkpoint as dcp
import safetensors
import safetensors.torch


def fsync_path(path, directory=False):
    flags = os.O_RDONLY | (os.O_DIRECTORY if directory else 0)
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def tree_bytes(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            total += os.path.getsize(os.path.join(root, name))
    return total


def touch_pages(state):
    # safetensors' load_file maps the file and reads on first touch: read one byte of
    # every 4 KiB page so every format is timed until its bytes are in memory.
    for tensor in state.values():
        int(tensor.view(torch.uint8)[::4096].sum())


class Peers:
    def __init__(self):
        self.state = None

    def hello(self, _request):
        return {"torch": torch.__version__, "safetensors": safetensors.__version__}

    def load_state(self, request):
        with open(request["layout"], "r", encoding="utf-8") as f:
            layout = json.load(f)
        state = {}
        with open(request["data"], "rb") as f:
            for entry in layout:
                f.seek(entry["offset"])
                raw = bytearray(entry["elements"] * 4)
                if f.readinto(raw) != len(raw):
                    raise ValueError("the state file is shorter than its layout")
                state[entry["name"]] = torch.frombuffer(raw, dtype=torch.float32)
        self.state = state
        total = sum(t.numel() * 4 for t in state.values())
        return {"tensors": len(state), "bytes": total}

    def save(self, request):
        fmt, path = request["format"], request["path"]
        started = time.perf_counter()
        if fmt == "dcp":
            writer = dcp.FileSystemWriter(path, sync_files=True)
            dcp.save(self.state, storage_writer=writer)
        elif fmt == "torch":
            torch.save(self.state, path)
            fsync_path(path)
            fsync_path(os.path.dirname(path), directory=True)
        elif fmt == "safetensors":
            safetensors.torch.save_file(self.state, path)
            fsync_path(path)
            fsync_path(os.path.dirname(path), directory=True)
        else:
            raise ValueError("unknown format " + repr(fmt))
        seconds = time.perf_counter() - started
        return {"seconds": seconds, "bytes_written": tree_bytes(path)}

    def load(self, request):
        fmt, path = request["format"], request["path"]
        started = time.perf_counter()
        if fmt == "dcp":
            dcp.load(self.state, storage_reader=dcp.FileSystemReader(path))
            loaded = self.state
        elif fmt == "torch":
            loaded = torch.load(path, map_location="cpu", weights_only=True)
        elif fmt == "safetensors":
            loaded = safetensors.torch.load_file(path)
        else:
            raise ValueError("unknown format " + repr(fmt))
        touch_pages(loaded)
        seconds = time.perf_counter() - started
        self.check_equal(loaded, fmt)
        del loaded
        return {"seconds": seconds}

    def check_equal(self, loaded, fmt):
        if loaded is self.state:
            # DCP loads in place: compare with the source bytes again.
            return
        if loaded.keys() != self.state.keys():
            raise ValueError(fmt + " load returned other tensor names")
        for name, tensor in self.state.items():
            # Bitwise: NaN payloads compare unequal as floats.
            if not torch.equal(loaded[name].view(torch.int32), tensor.view(torch.int32)):
                raise ValueError(fmt + " load returned other bytes for " + name)

    def reshard(self, request):
        source, target, ranks = request["from"], request["to"], int(request["ranks"])
        started = time.perf_counter()
        dcp.load(self.state, storage_reader=dcp.FileSystemReader(source))
        writer = dcp.FileSystemWriter(target, sync_files=True, thread_count=ranks)
        dcp.save(self.state, storage_writer=writer)
        seconds = time.perf_counter() - started
        return {"seconds": seconds, "bytes_written": tree_bytes(target)}


def main():
    # Single process on purpose; DCP says so once per call otherwise.
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    peers = Peers()
    handlers = {
        "hello": peers.hello,
        "state": peers.load_state,
        "save": peers.save,
        "load": peers.load,
        "reshard": peers.reshard,
    }
    for line in sys.stdin:
        request = json.loads(line)
        op = request.get("op")
        if op == "exit":
            break
        try:
            handler = handlers[op]
            reply = {"ok": True}
            reply.update(handler(request))
        except Exception as error:  # one reply per request, whatever failed
            reply = {"ok": False, "error": type(error).__name__ + ": " + str(error)}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
