"""A small, real, multi-process training job for gangs: data-parallel SGD over TCP.

``RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python -m examples.gang_train``
(one process per node; the node agent of a gang sets these, as torchrun does).

- The model, data and checkpoints are :mod:`examples.train`'s. Step ``s``'s mini-batch (drawn
  from an RNG keyed by ``(seed, s)``) is split across the ranks: rank ``r`` takes rows
  ``r, r + W, ...``. Each rank computes its shard's gradient; rank 0 adds them up in rank
  order and sends the sum back; every rank applies the same update to the same parameters.
  The sums are made in one fixed order, so a run resumed from a checkpoint ends bit-identical
  to an uninterrupted one.
- Rank 0 writes the checkpoints (on the checkpoint signal, every ``--checkpoint-every`` steps
  and at the end), the progress and ``result.json``; the other ranks resume from the same
  checkpoint and write nothing.
- A peer that goes (its connection closes) makes the others exit 75 (EX_TEMPFAIL): the agent
  reads that as "interrupted", and the controller relaunches the gang from the checkpoint.

Wire format: each message is an 8-byte big-endian length and that many bytes; a gradient is
the float64 bytes of every parameter's gradient, in :data:`examples.train.PARAMS` order (from
a worker, after the float64 sum of its squared errors).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import struct
import sys
import time
from pathlib import Path

import numpy as np

from examples.train import (
    PARAMS,
    CheckpointRequest,
    Config,
    forward,
    init_state,
    load,
    loss,
    make_data,
    params_sha256,
    report_gpu,
    save,
)
from provisioner.agent import protocol

EXIT_PEER_LOST = 75
CONNECT_TIMEOUT_S = 120.0


class PeerLost(Exception):
    """A peer's connection closed or failed."""


def send(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(struct.pack(">Q", len(data)) + data)
    except OSError as exc:
        raise PeerLost(str(exc)) from None


def recv(sock: socket.socket) -> bytes:
    head = _exactly(sock, 8)
    return _exactly(sock, struct.unpack(">Q", head)[0])


def _exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except OSError as exc:
            raise PeerLost(str(exc)) from None
        if not chunk:
            raise PeerLost("connection closed")
        buf.extend(chunk)
    return bytes(buf)


def connect(rank: int, world: int, addr: str, port: int) -> list[socket.socket]:
    """Rank 0: one socket per other rank, in rank order. Others: one socket to rank 0."""
    if rank == 0:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((addr, port))
        server.listen(world)
        server.settimeout(CONNECT_TIMEOUT_S)
        peers: dict[int, socket.socket] = {}
        try:
            while len(peers) < world - 1:
                conn, _ = server.accept()
                conn.settimeout(None)
                peers[int(recv(conn).decode())] = conn
        except TimeoutError:
            raise PeerLost(f"only {len(peers)} of {world - 1} peers connected") from None
        finally:
            server.close()
        return [peers[r] for r in sorted(peers)]
    until = time.monotonic() + CONNECT_TIMEOUT_S
    while True:
        try:
            sock = socket.create_connection((addr, port), timeout=5.0)
            sock.settimeout(None)
            send(sock, str(rank).encode())
            return [sock]
        except OSError:
            if time.monotonic() > until:
                raise PeerLost(f"rank 0 at {addr}:{port} never answered") from None
            time.sleep(0.2)


def shard_gradient(
    state: dict[str, np.ndarray],
    cfg: Config,
    x: np.ndarray,
    y: np.ndarray,
    step: int,
    rank: int,
    world: int,
) -> tuple[np.ndarray, float]:
    """This rank's part of step ``step``'s gradient (of the whole batch's mean loss), flat."""
    idx = np.random.default_rng([cfg.seed, step]).integers(0, cfg.samples, cfg.batch)[rank::world]
    xb, yb = x[idx], y[idx]
    h, out = forward(state, xb)
    err = out - yb
    d_out = 2.0 * err / cfg.batch
    d_h = (d_out @ state["w2"].T) * (1.0 - h**2)
    grads = {"w2": h.T @ d_out, "b2": d_out.sum(axis=0), "w1": xb.T @ d_h, "b1": d_h.sum(axis=0)}
    flat = np.concatenate(
        [np.ascontiguousarray(grads[n], dtype=np.float64).ravel() for n in PARAMS]
    )
    return flat, float(np.sum(err**2))


def apply(state: dict[str, np.ndarray], cfg: Config, flat: np.ndarray) -> None:
    at = 0
    for name in PARAMS:
        size = state[name].size
        g = flat[at : at + size].reshape(state[name].shape)
        at += size
        v = state["v_" + name]
        v *= cfg.momentum
        v += g
        state[name] -= cfg.lr * v


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m examples.gang_train", description=__doc__.split("\n")[0]
    )
    p.add_argument("--steps", type=int, default=400, help="training steps in all")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--step-seconds", type=float, default=0.05, help="extra time per step")
    p.add_argument("--checkpoint-every", type=int, default=100, help="steps; 0 = signal only")
    p.add_argument("--log-every", type=int, default=50, help="print a line every N steps")
    p.add_argument(
        "--checkpoint-dir", default=os.environ.get(protocol.ENV_CHECKPOINT_DIR, "checkpoints")
    )
    p.add_argument("--output-dir", default=os.environ.get(protocol.ENV_OUTPUT_DIR, "output"))
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    addr, port = (
        os.environ.get("MASTER_ADDR", "127.0.0.1"),
        int(os.environ.get("MASTER_PORT", "29500")),
    )
    cfg = Config(steps=args.steps, seed=args.seed)
    ckpt_dir, out_dir = Path(args.checkpoint_dir), Path(args.output_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    request = CheckpointRequest()
    signal.signal(protocol.checkpoint_signal(), request)
    x, y = make_data(cfg)
    resume = os.environ.get(protocol.ENV_RESUME_FROM) or ""
    step, state = load(Path(resume)) if resume else (0, init_state(cfg))
    print(
        f"rank {rank}/{world}: {f'resumed at step {step}' if resume else 'fresh start'}",
        flush=True,
    )
    try:
        peers = connect(rank, world, addr, port) if world > 1 else []
        report_gpu(96.0)
        progress_file = os.environ.get(protocol.ENV_PROGRESS_FILE) if rank == 0 else None
        while step < cfg.steps:
            mine, sq = shard_gradient(state, cfg, x, y, step, rank, world)
            if rank == 0:
                total, sq_total = mine.copy(), sq
                for peer in peers:  # rank order: the same sum every run
                    msg = recv(peer)
                    sq_total += struct.unpack(">d", msg[:8])[0]
                    total += np.frombuffer(msg[8:], dtype=np.float64)
                for peer in peers:
                    send(peer, total.tobytes())
            else:
                send(peers[0], struct.pack(">d", sq) + mine.tobytes())
                total = np.frombuffer(recv(peers[0]), dtype=np.float64).copy()
                sq_total = sq
            apply(state, cfg, total)
            step += 1
            if args.step_seconds > 0:
                time.sleep(args.step_seconds)
            if rank != 0:
                request.wanted = False  # rank 0 writes the gang's checkpoints
                continue
            periodic = args.checkpoint_every > 0 and step % args.checkpoint_every == 0
            if request.wanted or periodic:
                why = "signal" if request.wanted else "periodic"
                request.wanted = False
                print(f"checkpoint {save(ckpt_dir, step, state, cfg)} ({why})", flush=True)
            if args.log_every > 0 and (step % args.log_every == 0 or step == cfg.steps):
                print(f"step {step}/{cfg.steps} batch loss {sq_total / cfg.batch:.6f}", flush=True)
            if progress_file and (step % 10 == 0 or step == cfg.steps):
                protocol.report_progress(progress_file, step, total_steps=cfg.steps)
    except PeerLost as exc:
        print(f"rank {rank}: a peer went ({exc}); exiting {EXIT_PEER_LOST}", flush=True)
        return EXIT_PEER_LOST
    if rank == 0:
        if protocol.read_latest(ckpt_dir) != protocol.checkpoint_name(step):
            save(ckpt_dir, step, state, cfg)
        result = {
            "steps": step,
            "seed": cfg.seed,
            "world_size": world,
            "final_loss": loss(state, x, y),
            "params_sha256": params_sha256(state),
        }
        protocol.atomic_write(
            out_dir / "result.json", json.dumps(result, indent=2, sort_keys=True).encode()
        )
        print(f"done: {json.dumps(result, sort_keys=True)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
