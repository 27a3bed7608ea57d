"""The LMCache-like connector's backend: a CPU object store with a byte budget, LRU eviction, lookup pins,
and an optional local-disk tier that survives a restart.

Objects are CPU tensors keyed by strings (see `hashing.object_key`). A pinned key (pinned by a lookup
under an owner id, usually the request id) is never evicted until its owner unpins it.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from collections import OrderedDict

import torch


class DiskTier:
    """One file per object under `path`; the index is rebuilt from the directory, so it survives restarts.

    Files are written to a temporary name and renamed, so a crash never leaves a half-written object. Several
    processes may share the folder (pytest-xdist workers, a restarted engine beside a running one): a lookup
    asks the folder, so an object another process wrote is found and one it evicted is a miss, never an error.
    """

    def __init__(self, path: str, max_bytes: int):
        self.path = path
        self.max_bytes = max_bytes
        os.makedirs(path, exist_ok=True)
        self._index: OrderedDict[str, int] = OrderedDict()
        for name in sorted(os.listdir(path), key=lambda n: os.path.getmtime(os.path.join(path, n))):
            if name.endswith(".kv"):
                self._index[name[:-3]] = os.path.getsize(os.path.join(path, name))
        self._bytes = sum(self._index.values())

    @staticmethod
    def _file_id(key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()

    def _file(self, file_id: str) -> str:
        return os.path.join(self.path, file_id + ".kv")

    def _unlink(self, file_id: str) -> None:
        try:
            os.unlink(self._file(file_id))
        except FileNotFoundError:  # another process sharing the folder evicted it first
            pass

    def _present(self, file_id: str) -> bool:
        """Whether the object's file is there now, the index brought up to date either way."""
        try:
            size = os.path.getsize(self._file(file_id))
        except OSError:
            size = self._index.pop(file_id, None)
            if size is not None:
                self._bytes -= size
            return False
        if file_id not in self._index:
            self._index[file_id] = size
            self._bytes += size
        return True

    def contains(self, key: str) -> bool:
        """True when the object is on disk."""
        return self._present(self._file_id(key))

    def put(self, key: str, value: torch.Tensor) -> bool:
        """Write an object (evicting the oldest files); False when it cannot fit at all."""
        file_id = self._file_id(key)
        if file_id in self._index:
            return True
        fd, tmp = tempfile.mkstemp(dir=self.path, suffix=".tmp")
        with os.fdopen(fd, "wb") as handle:
            torch.save({"key": key, "value": value}, handle)
        size = os.path.getsize(tmp)
        if size > self.max_bytes:
            os.unlink(tmp)
            return False
        while self._bytes + size > self.max_bytes and self._index:
            old_id, old_size = self._index.popitem(last=False)
            self._unlink(old_id)
            self._bytes -= old_size
        os.replace(tmp, self._file(file_id))
        self._index[file_id] = size
        self._bytes += size
        return True

    def get(self, key: str) -> torch.Tensor | None:
        """Read an object, or None when absent."""
        file_id = self._file_id(key)
        if not self._present(file_id):
            return None
        try:
            payload = torch.load(self._file(file_id), weights_only=True)
        except FileNotFoundError:  # evicted by another process between the check and the read
            self._present(file_id)
            return None
        return payload["value"] if payload.get("key") == key else None

    def remove(self, key: str) -> None:
        """Delete an object if present."""
        file_id = self._file_id(key)
        size = self._index.pop(file_id, None) if self._present(file_id) else None
        if size is not None:
            self._unlink(file_id)
            self._bytes -= size

    def clear(self) -> None:
        """Delete every object."""
        for file_id in list(self._index):
            self._unlink(file_id)
        self._index.clear()
        self._bytes = 0


class ChunkStore:
    """CPU LRU store with a byte budget and lookup pins, optionally backed by a `DiskTier`.

    `events` collects ("stored", key) and ("removed", key) tuples for KV cache events.
    """

    def __init__(self, max_bytes: int, disk: DiskTier | None = None):
        if max_bytes <= 0:
            raise ValueError(f"cpu store size must be positive, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self.disk = disk
        self._objects: OrderedDict[str, torch.Tensor] = OrderedDict()
        self._bytes = 0
        self._pins: dict[str, dict[str, int]] = {}  # owner -> key -> count
        self._pin_counts: dict[str, int] = {}
        self.events: list[tuple[str, str]] = []
        self.lock = threading.RLock()

    @property
    def used_bytes(self) -> int:
        """Bytes held in CPU memory."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._objects)

    def keys(self) -> list[str]:
        """CPU-resident keys, least recently used first."""
        return list(self._objects)

    def contains(self, key: str) -> bool:
        """True when the object is in CPU memory or on disk."""
        return key in self._objects or (self.disk is not None and self.disk.contains(key))

    def _evict_for(self, size: int) -> bool:
        if self._bytes + size <= self.max_bytes:
            return True
        for key in list(self._objects):
            if self._bytes + size <= self.max_bytes:
                break
            if self._pin_counts.get(key):
                continue
            self._drop(key)
        return self._bytes + size <= self.max_bytes

    def _drop(self, key: str) -> None:
        value = self._objects.pop(key)
        self._bytes -= value.numel() * value.element_size()
        self.events.append(("removed", key))

    def put(self, key: str, value: torch.Tensor) -> bool:
        """Store a CPU tensor (owned by the store from now on); False when the budget cannot make room."""
        with self.lock:
            if key in self._objects:
                self._objects.move_to_end(key)
                return True
            size = value.numel() * value.element_size()
            if size > self.max_bytes or not self._evict_for(size):
                return False
            self._objects[key] = value
            self._bytes += size
            self.events.append(("stored", key))
            if self.disk is not None:
                self.disk.put(key, value)
            return True

    def get(self, key: str) -> torch.Tensor | None:
        """The object (promoted to most recently used; read through from disk), or None."""
        with self.lock:
            value = self._objects.get(key)
            if value is not None:
                self._objects.move_to_end(key)
                return value
            if self.disk is not None:
                value = self.disk.get(key)
                if value is not None:
                    size = value.numel() * value.element_size()
                    if size <= self.max_bytes and self._evict_for(size):
                        self._objects[key] = value
                        self._bytes += size
            return value

    def remove(self, key: str) -> None:
        """Forget an object in every tier (pins on it are dropped too)."""
        with self.lock:
            if key in self._objects:
                self._drop(key)
            if self.disk is not None:
                self.disk.remove(key)
            self._pin_counts.pop(key, None)
            for owned in self._pins.values():
                owned.pop(key, None)

    def pin(self, owner: str, keys: list[str]) -> None:
        """Keep `keys` from eviction until `owner` unpins (re-pinning under one owner does not stack)."""
        with self.lock:
            owned = self._pins.setdefault(owner, {})
            for key in keys:
                if key not in owned:
                    owned[key] = 1
                    self._pin_counts[key] = self._pin_counts.get(key, 0) + 1

    def unpin(self, owner: str) -> None:
        """Release every pin held by `owner`."""
        with self.lock:
            for key in self._pins.pop(owner, {}):
                count = self._pin_counts.get(key, 0) - 1
                if count > 0:
                    self._pin_counts[key] = count
                else:
                    self._pin_counts.pop(key, None)

    @property
    def num_pins(self) -> int:
        """Total pins held (0 when every lookup was released)."""
        return sum(self._pin_counts.values())

    def clear(self) -> None:
        """Drop every object and pin, in every tier."""
        with self.lock:
            for key in list(self._objects):
                self._drop(key)
            self._pins.clear()
            self._pin_counts.clear()
            if self.disk is not None:
                self.disk.clear()

    def take_events(self) -> list[tuple[str, str]]:
        """Events since the last call."""
        with self.lock:
            events, self.events = self.events, []
            return events


_SHARED_STORES: dict[tuple[str, str | None], ChunkStore] = {}
_SHARED_LOCK = threading.Lock()


def shared_store(name: str, max_bytes: int, disk_path: str | None = None, disk_max_bytes: int = 0) -> ChunkStore:
    """The process-wide store called `name` with the disk tier at `disk_path` (none: None), created on first use.

    The scheduler-role and worker-role instances of one engine (and its TP ranks) share it, the way
    LMCache's engine is a per-process singleton. A connector configured with a disk tier never gets a store of
    the same name that an earlier construction in the process made without it (or with another folder).
    """
    with _SHARED_LOCK:
        store = _SHARED_STORES.get((name, disk_path or None))
        if store is None:
            disk = DiskTier(disk_path, disk_max_bytes) if disk_path else None
            store = ChunkStore(max_bytes, disk)
            _SHARED_STORES[(name, disk_path or None)] = store
        return store


def drop_shared_store(name: str) -> None:
    """Forget the process-wide stores called `name`, whatever their disk tier (a simulated process restart keeps
    only the disk tier)."""
    with _SHARED_LOCK:
        for key in [k for k in _SHARED_STORES if k[0] == name]:
            del _SHARED_STORES[key]
