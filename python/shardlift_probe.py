"""ShardLift's resume probe: one canonical record per training step, for `shardlift resume-test`.

Call it from your training loop::

    import shardlift_probe as probe
    probe.step(step, model=model, optimizer=optimizer, scheduler=scheduler,
               batch=batch_indices, loss=loss)
    ...  # after a checkpoint is durable (fsynced, renamed, directory fsynced):
    probe.saved(step)

Every call is a no-op unless ``SHARDLIFT_PROBE`` names a file (``shardlift resume-test``
sets it). Each call appends one line of canonical JSON to that file with a single
``write(2)`` on an ``O_APPEND`` descriptor before it returns, so the supervisor sees the
record at once; the line protocol is documented in ``docs/resume-test.md``.

Only the standard library and torch are needed; numpy is used when it is installed (to
hash its global RNG state). The module never changes any RNG state it hashes.
"""

import hashlib
import json
import os
import random
import struct
import sys
import time

PROTOCOL_VERSION = 1
CHANNEL_VARIABLE = "SHARDLIFT_PROBE"
HOLD_VARIABLE = "SHARDLIFT_PROBE_HOLD_AFTER_STEP"
EVERY_VARIABLE = "SHARDLIFT_PROBE_EVERY"

_channel_fd = None
_channel_path = None


def enabled():
    """Whether a supervisor named a channel (the probe is a no-op otherwise)."""
    return bool(os.environ.get(CHANNEL_VARIABLE))


def _rank():
    return int(os.environ.get("RANK", "0"))


def _world():
    return int(os.environ.get("WORLD_SIZE", "1"))


def _emit(record):
    """Appends one canonical JSON line with one write(2); returns once the kernel has it."""
    global _channel_fd, _channel_path
    path = os.environ.get(CHANNEL_VARIABLE)
    if not path:
        return
    if _channel_fd is None or _channel_path != path:
        _channel_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        _channel_path = path
    line = (json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True) + "\n").encode()
    view = memoryview(line)
    while view:
        written = os.write(_channel_fd, view)
        view = view[written:]


def _tensor_bytes(tensor):
    import torch

    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    if flat.numel() == 0:
        return b""
    raw = flat.view(torch.uint8)
    try:
        return raw.numpy().tobytes()
    except (RuntimeError, TypeError, ImportError):
        return bytes(raw.tolist())


def tensor_digest(tensor):
    """SHA-256 over ``dtype|shape|`` followed by the tensor's exact bytes (little-endian, C order)."""
    header = "%s|%s|" % (str(tensor.dtype).replace("torch.", ""), ",".join(str(d) for d in tensor.shape))
    digest = hashlib.sha256(header.encode())
    digest.update(_tensor_bytes(tensor))
    return digest.hexdigest()


def _value_digest(value):
    """A digest of a nested value: tensors by their bytes, numbers by their exact bits."""
    import torch

    digest = hashlib.sha256()

    def feed(item):
        if isinstance(item, torch.Tensor):
            digest.update(b"T" + tensor_digest(item).encode())
        elif isinstance(item, bool) or item is None:
            digest.update(b"B" + repr(item).encode())
        elif isinstance(item, int):
            digest.update(b"I" + str(item).encode() + b";")
        elif isinstance(item, float):
            digest.update(b"F" + struct.pack("<d", item))
        elif isinstance(item, (str, bytes)):
            data = item.encode() if isinstance(item, str) else item
            digest.update(b"S" + str(len(data)).encode() + b":" + data)
        elif isinstance(item, dict):
            digest.update(b"D" + str(len(item)).encode() + b"{")
            for key in sorted(item, key=repr):
                feed(key)
                feed(item[key])
        elif isinstance(item, (list, tuple)):
            digest.update(b"L" + str(len(item)).encode() + b"[")
            for element in item:
                feed(element)
        elif hasattr(item, "tobytes"):
            digest.update(b"A" + str(getattr(item, "dtype", "")).encode() + b"|")
            digest.update(str(getattr(item, "shape", "")).encode() + b"|" + item.tobytes())
        else:
            digest.update(b"R" + repr(item).encode())

    feed(value)
    return digest.hexdigest()


def _parameter_names(model):
    return {id(parameter): name for name, parameter in model.named_parameters()}


def _model_components(model):
    out = {}
    for name, tensor in model.state_dict().items():
        out["param." + name] = tensor_digest(tensor)
    return out


def _optimizer_components(optimizer, model):
    names = _parameter_names(model) if model is not None else {}
    out = {}
    groups = []
    for group in optimizer.param_groups:
        groups.append({key: value for key, value in group.items() if key != "params"})
        for index, parameter in enumerate(group["params"]):
            name = names.get(id(parameter), "group%d.%d" % (len(groups) - 1, index))
            for slot, value in optimizer.state.get(parameter, {}).items():
                out["optimizer.%s.%s" % (name, slot)] = _value_digest(value)
    out["optimizer.param_groups"] = _value_digest(groups)
    return out


def _rng_components(generators):
    import torch

    out = {
        "rng.python": _value_digest(random.getstate()),
        "rng.torch_cpu": tensor_digest(torch.get_rng_state()),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for device, state in enumerate(torch.cuda.get_rng_state_all()):
            out["rng.torch_cuda%d" % device] = tensor_digest(state)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        out["rng.numpy"] = _value_digest(list(numpy.random.get_state()))
    for name, generator in (generators or {}).items():
        out["rng." + name] = tensor_digest(generator.get_state())
    return out


def _loss_bits(loss):
    import torch

    if isinstance(loss, torch.Tensor):
        return "%s:%s" % (str(loss.dtype).replace("torch.", ""), _tensor_bytes(loss).hex())
    return "float64:%s" % struct.pack("<d", float(loss)).hex()


def _hold_if_asked(step):
    hold = os.environ.get(HOLD_VARIABLE)
    if hold is not None and int(hold) == step:
        # The supervisor kills the whole process tree now; never run past step `hold`.
        while True:
            time.sleep(3600)


def step(step, model=None, optimizer=None, scheduler=None, batch=None, loss=None, generators=None, extra=None):
    """Reports the state after training step ``step`` (after the optimizer and scheduler stepped).

    ``batch``: the batch the step consumed — its sample indices (preferred) or its tensors.
    ``generators``: named ``torch.Generator`` objects the script owns (e.g. the sampler's).
    ``extra``: a dict of further named values to compare (each digested).
    """
    if not enabled():
        return
    started = time.perf_counter_ns()
    every = int(os.environ.get(EVERY_VARIABLE, "1"))
    record = {"v": PROTOCOL_VERSION, "kind": "step", "step": int(step), "rank": _rank(), "world": _world()}
    if every <= 1 or int(step) % every == 0:
        components = {}
        if model is not None:
            components.update(_model_components(model))
        if optimizer is not None:
            components.update(_optimizer_components(optimizer, model))
        if scheduler is not None:
            components["scheduler"] = _value_digest(scheduler.state_dict())
        if batch is not None:
            components["batch"] = _value_digest(batch)
        if loss is not None:
            components["loss"] = _loss_bits(loss)
        components.update(_rng_components(generators))
        for name, value in (extra or {}).items():
            components["extra." + name] = _value_digest(value)
        record["components"] = components
    record["probe_ns"] = time.perf_counter_ns() - started
    _emit(record)
    _hold_if_asked(int(step))


def saving(step):
    """Reports that the checkpoint of the state after ``step`` is about to be written."""
    if enabled():
        _emit({"v": PROTOCOL_VERSION, "kind": "saving", "step": int(step), "rank": _rank(), "world": _world()})


def saved(step):
    """Reports that the checkpoint of the state after ``step`` is durable (a restart may resume after it)."""
    if enabled():
        _emit({"v": PROTOCOL_VERSION, "kind": "saved", "step": int(step), "rank": _rank(), "world": _world()})
