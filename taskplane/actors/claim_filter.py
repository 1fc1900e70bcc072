"""Which dedupe identities may have been claimed: a Bloom filter kept beside intake.

When the wake queue is full, new work is refused with 503, but a duplicate of an
accepted message still gets its prior answer ("Wake admission is bounded"; a retry is
idempotent). Looking every refused send up in the store makes each refusal cost a
store round trip, queued behind the turn pipeline's commits: under overload the
refusals starve the turns. :class:`ClaimIndex` answers "was this identity possibly
claimed?" in memory: ``False`` is certain (the send is new work and is refused without
touching the store), ``True`` may be a false positive (about 1 %; the store decides).

Pure: no trio, no I/O. Keys are provider keys (40 hex characters of SHA-256 over the
dedupe identity), so their bits are already uniform and are used as the hash.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

BITS_PER_KEY = 10
"""Filter bits per expected key: about 1 % false positives with ``HASHES`` probes."""

HASHES = 7
MIN_CAPACITY = 1 << 16


class ClaimFilter:
    """A growable Bloom filter over provider keys (no false negatives).

    A segment holds ``capacity`` keys at ~1 % false positives; when it is full a new
    one twice as large takes further keys (a scalable Bloom filter), so the rate stays
    near 1 % per segment as the store grows. Memory: about 1.25 bytes per key.
    """

    def __init__(self, capacity: int = MIN_CAPACITY) -> None:
        self._segments: list[tuple[bytearray, int]] = []  # (bits, number of bits)
        self._capacity = 0
        self._count = 0
        self._grow(max(capacity, MIN_CAPACITY))

    def _grow(self, capacity: int) -> None:
        nbits = capacity * BITS_PER_KEY
        self._segments.append((bytearray((nbits + 7) // 8), nbits))
        self._capacity = capacity
        self._count = 0

    @staticmethod
    def _probes(key: str, nbits: int) -> Iterable[int]:
        try:
            h1 = int(key[:16], 16)
            h2 = int(key[16:32], 16) | 1
        except ValueError:
            # Not a provider key (a damaged or foreign store row): hash it instead of
            # failing, so one odd row can never stop intake from starting.
            digest = hashlib.blake2b(key.encode(), digest_size=16).digest()
            h1 = int.from_bytes(digest[:8], "big")
            h2 = int.from_bytes(digest[8:], "big") | 1
        return ((h1 + i * h2) % nbits for i in range(HASHES))

    def add(self, key: str) -> None:
        """Remember ``key`` (a provider key: at least 32 hex characters)."""
        if self._count >= self._capacity:
            self._grow(self._capacity * 2)
        bits, nbits = self._segments[-1]
        for bit in self._probes(key, nbits):
            bits[bit >> 3] |= 1 << (bit & 7)
        self._count += 1

    def may_contain(self, key: str) -> bool:
        """``False`` only if ``key`` was never added."""
        for bits, nbits in self._segments:
            if all(bits[bit >> 3] & (1 << (bit & 7)) for bit in self._probes(key, nbits)):
                return True
        return False


class ClaimIndex:
    """The live :class:`ClaimFilter` of a plane and its (re)loading from the store.

    Until the first load is installed every identity "may be claimed" (the store is
    asked, as without an index). Keys noted while a load runs are kept and added to the
    loaded filter, so an acceptance committed during the load is never missed.
    """

    def __init__(self) -> None:
        self._filter: ClaimFilter | None = None
        self._pending: list[str] | None = None

    @property
    def loaded(self) -> bool:
        """A filter built from the store is in use."""
        return self._filter is not None

    def begin_load(self) -> None:
        """A load from the store starts: keys noted from now on are kept for it."""
        self._pending = []

    def abandon_load(self) -> None:
        """The load failed: stop keeping keys for it (the current filter, if any, stays)."""
        self._pending = None

    def install(self, loaded: ClaimFilter) -> None:
        """Use ``loaded`` (built from every stored claim after :meth:`begin_load`)."""
        for key in self._pending or ():
            loaded.add(key)
        self._filter = loaded
        self._pending = None

    def note(self, key: str) -> None:
        """``key`` was just claimed (called right after its COMMIT)."""
        if self._filter is not None:
            self._filter.add(key)
        if self._pending is not None:
            self._pending.append(key)

    def may_be_claimed(self, key: str) -> bool:
        """``False``: ``key`` was certainly never claimed (new work)."""
        return self._filter is None or self._filter.may_contain(key)


def build_filter(count: int, keys: Iterable[str]) -> ClaimFilter:
    """A filter sized for ``count`` keys (and growth), holding ``keys``."""
    claims = ClaimFilter(capacity=2 * count)
    for key in keys:
        claims.add(key)
    return claims
