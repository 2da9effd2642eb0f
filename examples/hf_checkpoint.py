#!/usr/bin/env python3
"""A real client end to end: a checkpoint written by transformers' save_pretrained (sharded, with
its model.safetensors.index.json) loaded by xferlua.load straight onto a device, handed to a
model built on the meta device with load_state_dict(assign=True) -- no copy: each parameter is
the memory xferlua loaded into -- and its logits compared with from_pretrained's. Timed beside
from_pretrained and safetensors.torch.load_file of the same files, in the same run.

    python3 examples/hf_checkpoint.py [--device cuda:0] [--hidden 512] [--layers 4] [--shard 50MB]
                                      [--dir DIR] [--rounds 3]

Needs torch, transformers and safetensors (the GPU machine has them). Prints "same logits" or
exits non-zero, and a line per loader: seconds (best of --rounds) and GB/s of the checkpoint."""
import argparse
import os
import shutil
import sys
import tempfile
import time

import torch
import transformers

import xferlua


def build(args):
    config = transformers.LlamaConfig(hidden_size=args.hidden, intermediate_size=args.hidden * 4,
                                      num_hidden_layers=args.layers, num_attention_heads=max(1, args.hidden // 64),
                                      num_key_value_heads=max(1, args.hidden // 128), vocab_size=args.vocab,
                                      max_position_embeddings=512, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(args.dir, max_shard_size=args.shard, safe_serialization=True)
    return config


def bytes_of(folder):
    return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder) if f.endswith(".safetensors"))


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def on_meta(config):
    """The model's structure with no memory behind its parameters (buffers made as usual: the
    rotary tables are computed, not loaded), in bf16 as from_pretrained makes it."""
    register = torch.nn.Module.register_parameter

    def to_meta(module, name, param):
        register(module, name, param)
        if param is not None:
            module._parameters[name] = torch.nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)

    torch.nn.Module.register_parameter = to_meta
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # the checkpoint's, as from_pretrained builds it
    try:
        return transformers.LlamaForCausalLM(config)
    finally:
        torch.nn.Module.register_parameter = register
        torch.set_default_dtype(dtype)


def with_xferlua(config, index, device):
    state = xferlua.load(index, device=device)                 # every shard, onto the device
    tensors = {name: xferlua.to_torch(t) for name, t in state.items()}  # no copy (DLPack)
    model = on_meta(config)
    if "assign" in torch.nn.Module.load_state_dict.__code__.co_varnames:
        model.load_state_dict(tensors, assign=True)            # the parameters are xferlua's memory
    else:  # torch before 2.1: no assign; memory made, then copied into (to_empty empties the
        # computed buffers too: kept and put back)
        buffers = {n: b.clone() for n, b in model.named_buffers()}
        model.to_empty(device=device.replace("host", "cpu"))
        model.load_state_dict(tensors)
        with torch.no_grad():
            for n, b in model.named_buffers():
                b.copy_(buffers[n])
    model.to(device.replace("host", "cpu"))                    # the computed buffers
    sync(device)
    return model, state


def with_from_pretrained(folder, device):
    model = transformers.LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.bfloat16)
    model.to(device.replace("host", "cpu"))
    sync(device)
    return model


def with_load_file(folder, device):
    import safetensors.torch
    state = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            state.update(safetensors.torch.load_file(os.path.join(folder, f), device=device.replace("host", "cpu")))
    sync(device)
    return state


def best(fn, rounds):
    times, out = [], None
    for _ in range(rounds):
        out = None
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "host")
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--shard", default="50MB", help="save_pretrained's max_shard_size")
    p.add_argument("--dir", help="where the checkpoint is written (default: a temporary folder)")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    made = args.dir is None
    args.dir = args.dir or tempfile.mkdtemp(prefix="xferlua-hf-")
    try:
        config = build(args)
        index = os.path.join(args.dir, "model.safetensors.index.json")
        if not os.path.exists(index):
            sys.exit("hf_checkpoint: save_pretrained wrote no shard index (a larger model or a smaller --shard)")
        size = bytes_of(args.dir)
        shards = len([f for f in os.listdir(args.dir) if f.endswith(".safetensors")])
        print("hf_checkpoint: LlamaForCausalLM, %d layers, hidden %d: %.1f MiB bf16 in %d shards with an index; "
              "device %s; torch %s, transformers %s"
              % (args.layers, args.hidden, size / 2**20, shards, args.device, torch.__version__,
                 transformers.__version__))
        dev = args.device.replace("host", "cpu")
        ids = torch.randint(0, args.vocab, (1, 32), generator=torch.Generator().manual_seed(1)).to(dev)
        t_x, (mine, state) = best(lambda: with_xferlua(config, index, args.device), args.rounds)
        t_p, theirs = best(lambda: with_from_pretrained(args.dir, args.device), args.rounds)
        with torch.no_grad():
            a, b = mine(ids).logits, theirs(ids).logits
        if not torch.equal(a, b):
            sys.exit("hf_checkpoint: the logits differ (max |diff| %g)" % (a.float() - b.float()).abs().max())
        shared = all(xferlua.to_torch(state[n]).data_ptr() == prm.data_ptr()
                     for n, prm in mine.named_parameters() if n in state)
        print("hf_checkpoint: same logits as from_pretrained (torch.equal, %s); parameters %s xferlua's memory"
              % (tuple(a.shape), "are" if shared else "are copies of"))
        assign = "assign" in torch.nn.Module.load_state_dict.__code__.co_varnames
        rows = [("xferlua.load + load_state_dict(%s)" % ("assign=True" if assign else "copied: torch < 2.1"), t_x),
                ("from_pretrained + .to(device)", t_p)]
        try:
            t_s, _ = best(lambda: with_load_file(args.dir, args.device), args.rounds)
            # onto the host, load_file maps the file: its bytes are read when first used
            rows.append(("safetensors.torch.load_file%s" % (" (mmap, unread)" if args.device == "host" else ""), t_s))
        except ImportError:
            print("hf_checkpoint: safetensors is not installed: load_file not timed")
        for what, secs in rows:
            print("hf_checkpoint: %-45s %8.3f s  %6.2f GB/s  (%.2fx from_pretrained)"
                  % (what, secs, size / secs / 1e9, t_p / secs))
    finally:
        if made:
            shutil.rmtree(args.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
