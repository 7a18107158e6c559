"""ChannelStatistics, apart from the channel ends.

Its own module because dataclasses (with inspect, re and ast) costs ~12 ms
to import: the ends module is imported by every worker that receives a
channel end, and only statistics() needs this.
"""

from __future__ import annotations

import dataclasses

__all__ = ["ChannelStatistics"]


@dataclasses.dataclass(frozen=True)
class ChannelStatistics:
    """A snapshot of a channel (trio's names).

    Attributes:
        current_buffer_used: items buffered now.
        max_buffer_size: the channel's maxsize (``math.inf`` if unbounded).
        open_send_channels: open send ends: each clone counts, the copies of one
            end (passed to workers, on their way to an interpreter) do not.
        open_receive_channels: open receive ends (likewise).
        tasks_waiting_send: senders (tasks or threads) blocked in send.
        tasks_waiting_receive: receivers blocked in recv or select.
    """

    current_buffer_used: int
    max_buffer_size: float
    open_send_channels: int
    open_receive_channels: int
    tasks_waiting_send: int
    tasks_waiting_receive: int
