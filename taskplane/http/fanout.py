"""SSE bytes of published Task updates, encoded once per update, not per subscriber.

owner(T) sends the same :class:`~taskplane.model.types.StreamResponse` object (a
``statusUpdate`` or ``artifactUpdate``) to every subscriber of T. Each SSE stream
asks :class:`FrameEncoder` for its bytes: the first stream to ask encodes it, and the
others get the same ``bytes`` object, so 1,000 subscribers cost one encoding, and
writing to each is only the socket send. Snapshots (``{"task"}``, the first frame
of each stream) are built per subscriber and encoded on their own.
"""

from __future__ import annotations

from collections import OrderedDict

from taskplane.http.sse import sse_frame
from taskplane.model.codec import encode
from taskplane.model.types import StreamResponse

SHARED_FRAMES = 1024
"""Encoded updates remembered (oldest forgotten first); an update whose entry was
forgotten is simply encoded again."""


class FrameEncoder:
    """``frame`` -> its SSE bytes, shared by every stream that receives that object.

    Keyed by object identity (an update is one object for all its subscribers); the
    entry keeps the frame alive, so its identity is not reused while remembered.
    One per HTTP app; runs on the trio thread only.
    """

    def __init__(self, size: int = SHARED_FRAMES) -> None:
        self._size = size
        self._encoded: OrderedDict[int, tuple[StreamResponse, bytes]] = OrderedDict()

    def __call__(self, frame: StreamResponse) -> bytes:
        """``data: <StreamResponse JSON>\\n\\n`` for ``frame`` (see ``sse_frame``)."""
        if frame.task is not None:  # a per-subscriber snapshot: nothing to share
            return sse_frame(encode(frame))
        key = id(frame)
        known = self._encoded.get(key)
        if known is not None and known[0] is frame:
            return known[1]
        data = sse_frame(encode(frame))
        self._encoded[key] = (frame, data)
        if len(self._encoded) > self._size:
            self._encoded.popitem(last=False)
        return data
